// ir/pipeline.cpp -- the pass registry and the flat pass pipeline.
#include <fmt/format.h>

#include <cstdlib>
#include <functional>

#include "ir/passes.h"
#include "runtime/check.h"
#include "runtime/files.h"
#include "runtime/log.h"

namespace kiln::ir {
namespace {

constexpr PassInfo kPasses[] = {
#define PASS(name, fn, doc) {name, fn, doc},
#include "ir/passes.def"
#undef PASS
};

// Writes the graph that made a pass fail where the user can find it: KILN_REPRO_DIR, else this
// user's private scratch folder, always as a new file (O_EXCL: never through someone's symlink,
// never over another file). Says why when it could not.
std::string write_reproducer(const Graph& g) {
  std::string text = print(g, {.locations = false});
  try {
    const char* env = std::getenv("KILN_REPRO_DIR");
    std::string dir = env && *env ? env : files::user_temp_dir();
    return files::write_new(dir, fmt::format("kiln-repro-{:016x}-", std::hash<std::string>{}(text)), ".ir", text,
                            "reproducer");
  } catch (const Error& e) {
    return fmt::format("(nowhere: {})", e.what());
  }
}

}  // namespace

std::span<const PassInfo> all_passes() { return kPasses; }

const PassInfo& find_pass(std::string_view name) {
  std::vector<std::string_view> names;
  for (const PassInfo& p : kPasses) {
    if (p.name == name) return p;
    names.push_back(p.name);
  }
  throw Error(fmt::format("unknown pass '{}' (known: {})", name, fmt::join(names, ", ")));
}

std::vector<std::string> default_pipeline() {
  std::vector<std::string> names;
  for (const char* n : {"canonicalize", "fold", "cse", "dce"}) {
    for (const PassInfo& p : kPasses)
      if (p.name == std::string_view(n)) names.emplace_back(n);
  }
  return names;
}

std::vector<std::string> lowering_pipeline() { return {"transpose-matmul", "matmul-epilogue", "fuse"}; }

Graph run_passes(Graph g, std::span<const std::string> names, const PipelineOptions& opt) {
  bool log_jit = log_enabled(LogTopic::Jit);
  if (log_jit && !names.empty())
    log(LogTopic::Jit, fmt::format("graph @{} before {}:\n{}", g.name, names.front(), print(g)));
  for (const std::string& name : names) {
    const PassInfo& pass = find_pass(name);
    Graph next;
    try {
      next = pass.fn == static_cast<PassFn>(fuse) ? fuse(g, opt.fuse) : pass.fn(g);
      if (opt.verify) verify(next);
    } catch (const std::exception& e) {
      std::string file = write_reproducer(g);
      throw Error(
          fmt::format("pass {} failed on @{}: {}\n  the input graph is in {}; replay with: kiln-ir opt {} --passes={}",
                      name, g.name, e.what(), file, file, name));
    }
    g = std::move(next);
    if (opt.after_pass) opt.after_pass(name, g);
    if (log_jit) log(LogTopic::Jit, fmt::format("after {}:\n{}", name, print(g)));
  }
  return g;
}

}  // namespace kiln::ir
