// tests/distributed/solo_group.h -- a process group of this process alone, for the tests of
// the all_reduce op in one process (every rank's value is this one, so a reduction gives the
// operand back). Across processes the op is tested in tests/distributed.
#pragma once

#include "distributed/process_group.h"
#include "tests/distributed/ranks.h"

namespace kiln::test {

/// Made on first use on a free loopback port; lives as long as the process.
inline distributed::ProcessGroup& solo_group() {
  static distributed::ProcessGroup* pg = [] {
    distributed::Options o;
    o.rank = 0, o.world_size = 1, o.master_port = free_port();
    return new distributed::ProcessGroup(o);
  }();
  return *pg;
}

}  // namespace kiln::test
