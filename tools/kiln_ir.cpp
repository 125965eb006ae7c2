// tools/kiln_ir.cpp -- kiln-ir: print, check, optimize, draw and run kiln IR files.
//
//   kiln-ir dump f.ir                          the graph as the printer writes it
//   kiln-ir verify f.ir                        "ok", or the verifier's error (exit 1)
//   kiln-ir opt f.ir --passes=cse,dce -o g.ir  run passes (--print-after-all shows each)
//   kiln-ir dot f.ir | dot -Tsvg > f.svg       Graphviz
//   kiln-ir run f.ir --input x.npy --repeat 100   (--fuse: the jit's passes and fusion first)
//   kiln-ir codegen f.ir --target=cpu          LLVM IR of each fused group's kernel
//   kiln-ir codegen f.ir --target=cuda [--ptx --arch sm_90]   CUDA C (or PTX) of each
//   kiln-ir cost f.ir --device H200            bytes, FLOPs, launches and a roofline bound per kernel
//   kiln-ir inspect m.kiln                     a saved module: versions, signature, parameters, kernels
//   kiln-ir extract m.kiln -o w.safetensors    a saved module's tensors, as a file other tools read
//   kiln-ir --load libmyops.so run f.ir       a graph calling ops a library registers (register_op)
//
// Every command reads IR text or a saved module (jit::save); run on a module uses its
// parameters and fuses as the jit does.
//
// Exit status: 0 on success, 1 when the file or a command fails, 2 for bad usage.
#include "tools/kiln_ir.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <dlfcn.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <iterator>

#include "ir/passes.h"
#include "runtime/check.h"
#include "runtime/error.h"

namespace kiln::tools {
namespace {

constexpr std::string_view kCommands[] = {"dump",    "verify",  "opt",     "dot", "run",
                                          "codegen", "inspect", "extract", "cost"};

struct Args {
  std::string file;
  std::vector<std::string> passes;
  bool print_after_all = false;
  std::string output = "-";
  CodegenOptions codegen;
  CostOptions cost;
  std::vector<std::string> dims;  // inspect: NAME=SIZE
  RunOptions run;
  std::vector<std::string> libraries;  // --load: shared libraries that register ops
};

// Loads each library, whose static initializers register its ops (kiln::register_op), so
// graphs that call them parse, print and run.
void load_libraries(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    if (dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) continue;
    const char* why = dlerror();
    throw kiln::Error(fmt::format("--load {}: {}", path, why ? why : "dlopen failed"));
  }
}

// The graph, verified: every command but dump works on valid graphs only.
Module load_verified(const std::string& path) {
  Module m = load_module(path);
  try {
    ir::verify(m.graph);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", path, e.what()));
  }
  return m;
}

int opt(const Args& a) {
  Module m = load_verified(a.file);
  std::vector<std::string> passes = a.passes.empty() ? ir::default_pipeline() : a.passes;
  for (const std::string& p : passes) ir::find_pass(p);  // unknown names fail before any pass runs
  ir::PipelineOptions options;
  if (a.print_after_all) {
    options.after_pass = [](const std::string& pass, const ir::Graph& g) {
      fmt::print("// after {}\n{}", pass, ir::print(g));
      std::fflush(stdout);
    };
  }
  ir::Graph g = ir::run_passes(std::move(m.graph), passes, options);
  // With --print-after-all and no -o, the last dump already is the result.
  if (a.output != "-" || !a.print_after_all || passes.empty()) write_text(a.output, ir::print(g));
  return 0;
}

int dispatch(const CLI::App& app, const Args& a) {
  load_libraries(a.libraries);
  if (app.got_subcommand("dump")) {
    write_text("-", ir::print(load_module(a.file).graph));
  } else if (app.got_subcommand("verify")) {
    load_verified(a.file);
    fmt::print("ok\n");
  } else if (app.got_subcommand("opt")) {
    return opt(a);
  } else if (app.got_subcommand("dot")) {
    write_text(a.output, to_dot(load_module(a.file).graph));
  } else if (app.got_subcommand("run")) {
    run_module(load_verified(a.file), a.run);
  } else if (app.got_subcommand("codegen")) {
    write_text(a.output, codegen_module(load_verified(a.file), a.codegen));
  } else if (app.got_subcommand("cost")) {
    write_text(a.output, cost_module(load_verified(a.file), a.cost));
  } else if (app.got_subcommand("inspect")) {
    write_text("-", inspect_module(load_verified(a.file), a.dims));
  } else if (app.got_subcommand("extract")) {
    Module m = load_module(a.file);
    KILN_CHECK(m.format == "module", "extract: {} is IR text, which holds no tensors (extract reads saved modules)",
               a.file);
    KILN_CHECK(a.output != "-", "extract: give the .safetensors file to write with -o");
    write_text(a.output, m.tensors);
    fmt::print("wrote {} ({} tensors, {} bytes)\n", a.output, m.params.size(), m.tensors.size());
  }
  return 0;
}

void add_file(CLI::App* cmd, Args& a) {
  cmd->add_option("file", a.file, "an IR text file (.ir), a saved module (jit::save), or - for standard input")
      ->required();
}

}  // namespace
}  // namespace kiln::tools

int main(int argc, char** argv) {
  using namespace kiln::tools;
  CLI::App app("kiln-ir: print, check, optimize, draw and run kiln IR files", "kiln-ir");
  app.require_subcommand(1, 1);
  app.failure_message(
      [](const CLI::App*, const CLI::Error& e) { return fmt::format("kiln-ir: {} (see kiln-ir --help)\n", e.what()); });
  Args a;
  app.add_option("--load", a.libraries,
                 "a shared library to load first, whose registered ops (kiln::register_op) the graph calls; "
                 "repeatable")
      ->type_name("LIB.so");
  app.fallthrough();
  add_file(app.add_subcommand("dump", "print the graph as the printer writes it"), a);
  add_file(app.add_subcommand("verify", "check the graph; print ok or the first error"), a);
  CLI::App* opt = app.add_subcommand("opt", "run passes and print the result");
  add_file(opt, a);
  opt->add_option("--passes", a.passes, "comma-separated pass names (default: the jit pipeline)")->delimiter(',');
  opt->add_flag("--print-after-all", a.print_after_all, "print '// after <pass>' and the graph after each pass");
  opt->add_option("-o,--output", a.output, "write the result here instead of standard output");
  CLI::App* dot = app.add_subcommand("dot", "write the graph in Graphviz dot");
  add_file(dot, a);
  dot->add_option("-o,--output", a.output, "write here instead of standard output");
  CLI::App* run = app.add_subcommand("run", "run the graph as the jit does (fused groups compiled) and time it");
  add_file(run, a);
  run->add_flag("--fuse", a.run.fuse, "run the jit's passes and fusion first (always, for a saved module)");
  run->add_option("--input", a.run.inputs,
                  "an .npy file per graph input, in order, or name=file.npy for a module's named input "
                  "(default: random)");
  run->add_option("--dim", a.run.dims, "NAME=SIZE for a symbolic dim no --input binds");
  run->add_option("--seed", a.run.seed, "seed for random inputs and params")
      ->check(CLI::Validator(
          [](const std::string& v) {
            uint64_t n = 0;
            auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
            return ec == std::errc() && end == v.data() + v.size() && !v.empty()
                       ? std::string()
                       : fmt::format("'{}' is not an integer in [0, 2^64)", v);
          },
          "UINT"));
  run->add_option("--repeat", a.run.repeat, "runs to time (default 1)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  run->add_option("--save", a.run.save_dir, "write each output as out<i>.npy in this folder");
  CLI::App* codegen = app.add_subcommand("codegen", "print the source of each fused group's kernel");
  add_file(codegen, a);
  codegen->add_option("--target", a.codegen.target, "cpu (LLVM IR, the default) or cuda (CUDA C)");
  codegen->add_option("--arch", a.codegen.arch, "cuda: the architecture for --ptx (default sm_80)");
  codegen->add_flag("--ptx", a.codegen.ptx, "cuda: NVRTC's PTX instead of the CUDA C (no GPU needed)");
  codegen->add_option("-o,--output", a.output, "write here instead of standard output");
  codegen->add_option("--dim", a.codegen.dims, "NAME=SIZE for a symbolic dim (default 64)");
  CLI::App* cost = app.add_subcommand("cost", "bytes, FLOPs, launches and a roofline bound per kernel on a device");
  add_file(cost, a);
  cost->add_option("--device", a.cost.device, "the device whose peaks bound the kernels: A100, H100 or H200 (default)");
  cost->add_option("--dim", a.cost.dims, "NAME=SIZE for a symbolic dim (default 64)");
  cost->add_option("--top", a.cost.top, "kernels to list, by bound (default 20)")->check(CLI::Range(1, 1 << 20));
  cost->add_flag("--tf32", a.cost.tf32, "f32 GEMMs and convolutions on the tensor cores as TF32");
  cost->add_option("-o,--output", a.output, "write here instead of standard output");
  CLI::App* inspect =
      app.add_subcommand("inspect", "a saved module's metadata, parameters and the kernels it compiles");
  add_file(inspect, a);
  inspect->add_option("--dim", a.dims, "NAME=SIZE for a dynamic dim, for the kernel list (default 64)");
  CLI::App* extract = app.add_subcommand("extract", "write a saved module's tensors as a .safetensors file");
  add_file(extract, a);
  extract->add_option("-o,--output", a.output, "the .safetensors file to write")->required();
  if (argc > 1 && argv[1][0] != '-' &&
      std::find(std::begin(kCommands), std::end(kCommands), argv[1]) == std::end(kCommands)) {
    fmt::print(stderr, "kiln-ir: unknown command '{}' (known: {})\n", argv[1], fmt::join(kCommands, ", "));
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return dispatch(app, a);
  } catch (const kiln::Error& e) {
    fmt::print(stderr, "kiln-ir: {}\n", e.what());
  } catch (const kiln::InternalError& e) {
    fmt::print(stderr, "kiln-ir: internal error: {}\n", e.what());
  } catch (const std::exception& e) {
    fmt::print(stderr, "kiln-ir: {}\n", e.what());
  }
  return 1;
}
