// tests/tools/registered_ops.cpp -- a library of one registered op, mytools::scale_rows, for
// kiln-ir --load: its static initializer registers the op when the tool loads it.
#include <kiln/kiln.h>

namespace {

const bool kRegistered = [] {
  kiln::register_op("mytools::scale_rows(Tensor x, float scale=2.0) -> Tensor")
      .rule([](const kiln::OpCall& c) { return c.input(0).type(); })
      .cpu([](const kiln::OpCall& c) { return (c.input(0) * c.get<double>("scale")).contiguous(); });
  return true;
}();

}  // namespace
