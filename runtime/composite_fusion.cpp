// runtime/composite_fusion.cpp -- when an eager composite runs compiled; jit/composite_runner.cpp runs it.
#include "runtime/composite_fusion.h"

#include "runtime/check.h"
#include "runtime/recorder.h"

namespace kiln {
namespace {
thread_local int t_off = 0;
detail::CompositeRunner g_run = nullptr;
bool (*g_fusion_on)() = nullptr;
}  // namespace

CompositeFusionOff::CompositeFusionOff() { ++t_off; }
CompositeFusionOff::~CompositeFusionOff() { --t_off; }

bool composite_fuses(std::span<const Tensor> args) {
  if (t_off > 0 || !g_run || active_recorder() || !g_fusion_on()) return false;
  bool cuda = false;
  for (const Tensor& x : args) {
    if (!x.defined() || x.numel() == 0) return false;
    cuda = cuda || x.device().is_cuda();
  }
  return cuda;
}

std::vector<Tensor> run_composite(const std::string& key, std::span<const Tensor> args, const CompositeBody& body) {
  KILN_ASSERT(g_run != nullptr);
  return g_run(key, args, body);
}

namespace detail {
void install_composite_runner(CompositeRunner run, bool (*fusion_on)()) {
  g_run = run;
  g_fusion_on = fusion_on;
}
}  // namespace detail

}  // namespace kiln
