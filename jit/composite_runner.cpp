// jit/composite_runner.cpp -- the runner of runtime/composite_fusion.h: per key, one composite
// jit::Function (FunctionAccess::composite), whose plan cache holds its signatures.
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "jit/trace.h"
#include "jit/tracer.h"
#include "runtime/autocast.h"
#include "runtime/composite_fusion.h"

namespace kiln::jit {
namespace {

struct CompositeRegistry {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<Function>> functions;
};
CompositeRegistry& composite_registry() {
  static CompositeRegistry* r = new CompositeRegistry;  // never destroyed: composites may run at exit
  return *r;
}

std::shared_ptr<Function> composite_function_for(const std::string& key, const CompositeBody& body) {
  CompositeRegistry& r = composite_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::shared_ptr<Function>& f = r.functions[key];
  if (!f) {
    // The caller widened its arguments as autocast asks; the body then runs as written,
    // whatever guard the call is made under (the plan does not depend on it).
    TensorFn fn = [body](std::span<const Tensor> in) {
      AutocastGuard no_autocast(DType::BF16, /*enabled=*/false);
      return body(in);
    };
    f = std::make_shared<Function>(FunctionAccess::composite(std::move(fn), key));
  }
  return f;
}

std::vector<Tensor> run_composite_function(const std::string& key, std::span<const Tensor> args,
                                           const CompositeBody& body) {
  return composite_function_for(key, body)->call(args);
}

const bool composite_runner_installed =
    (kiln::detail::install_composite_runner(&run_composite_function, &fusion_enabled), true);

}  // namespace

Stats composite_stats(const std::string& key) {
  CompositeRegistry& r = composite_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.functions.find(key);
  return it == r.functions.end() ? Stats{} : it->second->stats();
}

}  // namespace kiln::jit
