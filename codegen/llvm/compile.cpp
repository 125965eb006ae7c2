// codegen/llvm/compile.cpp -- the CPU backend: LLVM IR text -> O3 for the host CPU -> object
// code -> linked into the process by ORC's LLJIT. The only file that includes LLVM headers
// (its C API: stable, and small to compile).
#include <fmt/format.h>
#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/IRReader.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <llvm/Config/llvm-config.h>

#include <mutex>

#include "codegen/backend.h"
#include "codegen/llvm/emit.h"
#include "runtime/check.h"
#include "runtime/log.h"
#include "runtime/profiler.h"

namespace kiln::codegen {
namespace {

std::string take_message(char* m) {
  std::string s = m ? m : "";
  LLVMDisposeMessage(m);
  return s;
}
std::string take_error(LLVMErrorRef e) { return take_message(LLVMGetErrorMessage(e)); }

// LLVM reports remarks and warnings through its context's handler, whose default writes them to
// stderr: a kernel whose loop carries a vectorize hint it could not honour gives "remark: loop
// not vectorized: ...". Those describe our generated code, not the user's program: they go to
// KILN_LOG=codegen. Errors are kept for the exception that the failing step throws.
void route_diagnostic(LLVMDiagnosticInfoRef info, void* errors) {
  std::string text = take_message(LLVMGetDiagInfoDescription(info));
  switch (LLVMGetDiagInfoSeverity(info)) {
    case LLVMDSError:
      *static_cast<std::string*>(errors) += (static_cast<std::string*>(errors)->empty() ? "" : "; ") + text;
      return;
    case LLVMDSWarning: log(LogTopic::Codegen, "LLVM warning: " + text); return;
    case LLVMDSRemark: log(LogTopic::Codegen, "LLVM remark: " + text); return;
    case LLVMDSNote: log(LogTopic::Codegen, "LLVM note: " + text); return;
  }
}

class LlvmBackend final : public Backend {
 public:
  LlvmBackend() {
    LLVMInitializeNativeTarget();
    LLVMInitializeNativeAsmPrinter();
    triple_ = take_message(LLVMGetDefaultTargetTriple());
    cpu_ = take_message(LLVMGetHostCPUName());
    features_ = take_message(LLVMGetHostCPUFeatures());
    char* err = nullptr;
    if (LLVMGetTargetFromTriple(triple_.c_str(), &target_, &err))
      throw Error(fmt::format("codegen: no LLVM target for {}: {}", triple_, take_message(err)));
    auto has = [&](const char* f) {
      return ("," + features_ + ",").find(fmt::format(",+{},", f)) != std::string::npos;
    };
    math_.fma = has("fma");
    math_.avx2 = has("avx2");
    math_.avx512f = has("avx512f");
    target_id_ = fmt::format("llvm {}; {}; {}; {}", LLVM_VERSION_STRING, triple_, cpu_, features_);
  }
  ~LlvmBackend() override {
    if (jit_) LLVMOrcDisposeLLJIT(jit_);
  }

  const std::string& target_id() const override { return target_id_; }

  std::string emit(const ir::Graph& body, const KernelLayout& layout, const std::string& symbol) const override {
    return emit_llvm_ir(body, layout, symbol, math_);
  }

  std::string compile(const std::string& source) const override {
    LLVMContextRef ctx = LLVMContextCreate();
    std::string diagnosed;  // errors LLVM reported through the handler
    LLVMContextSetDiagnosticHandler(ctx, route_diagnostic, &diagnosed);
    LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(source.data(), source.size(), "kernel");
    LLVMModuleRef m = nullptr;
    char* err = nullptr;
    if (LLVMParseIRInContext(ctx, buf, &m, &err)) {  // takes the buffer
      LLVMContextDispose(ctx);
      throw Error(fmt::format("codegen: the generated LLVM IR does not parse: {}", take_message(err)));
    }
    LLVMTargetMachineRef tm =
        LLVMCreateTargetMachine(target_, triple_.c_str(), cpu_.c_str(), features_.c_str(), LLVMCodeGenLevelAggressive,
                                LLVMRelocPIC, LLVMCodeModelJITDefault);
    LLVMTargetDataRef layout = LLVMCreateTargetDataLayout(tm);
    LLVMSetModuleDataLayout(m, layout);
    LLVMSetTarget(m, triple_.c_str());
    std::string error;
    if (LLVMVerifyModule(m, LLVMReturnStatusAction, &err)) {
      error = take_message(err);
      LLVMDisposeTargetData(layout);
      LLVMDisposeTargetMachine(tm);
      LLVMDisposeModule(m);
      LLVMContextDispose(ctx);
      throw Error(fmt::format("codegen: the generated LLVM IR is invalid: {}", error));
    }
    take_message(err);
    LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
    LLVMPassBuilderOptionsSetVerifyEach(po, 0);
    LLVMPassBuilderOptionsSetLoopVectorization(po, 1);
    LLVMPassBuilderOptionsSetSLPVectorization(po, 1);
    LLVMPassBuilderOptionsSetLoopInterleaving(po, 1);
    LLVMPassBuilderOptionsSetLoopUnrolling(po, 1);
    LLVMErrorRef perr;
    {
      profiler::Scope event(profiler::Kind::Compile, "LLVM optimize");
      perr = LLVMRunPasses(m, "default<O3>", tm, po);
    }
    LLVMDisposePassBuilderOptions(po);
    std::string object;
    if (perr) {
      error = take_error(perr);
    } else {
      profiler::Scope event(profiler::Kind::Compile, "LLVM codegen");
      LLVMMemoryBufferRef obj = nullptr;
      if (LLVMTargetMachineEmitToMemoryBuffer(tm, m, LLVMObjectFile, &err, &obj)) {
        error = take_message(err);
      } else {
        object.assign(LLVMGetBufferStart(obj), LLVMGetBufferSize(obj));
        LLVMDisposeMemoryBuffer(obj);
      }
    }
    LLVMDisposeTargetData(layout);
    LLVMDisposeTargetMachine(tm);
    LLVMDisposeModule(m);
    LLVMContextDispose(ctx);
    if (object.empty())
      throw Error(fmt::format("codegen: LLVM could not compile a kernel: {}", error.empty() ? diagnosed : error));
    return object;
  }

  KernelFn load(const std::string& object, const std::string& symbol) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!jit_) start_jit();
    LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(object.data(), object.size(), symbol.c_str());
    if (LLVMErrorRef e = LLVMOrcLLJITAddObjectFile(jit_, LLVMOrcLLJITGetMainJITDylib(jit_), buf))
      throw Error(fmt::format("codegen: cannot link kernel {}: {}", symbol, take_error(e)));
    LLVMOrcExecutorAddress addr = 0;
    if (LLVMErrorRef e = LLVMOrcLLJITLookup(jit_, &addr, symbol.c_str()))
      throw Error(fmt::format("codegen: kernel {} does not resolve: {}", symbol, take_error(e)));
    return reinterpret_cast<KernelFn>(static_cast<uintptr_t>(addr));
  }

 private:
  // One LLJIT for the process; kernels resolve SLEEF and libm from the process's symbols.
  void start_jit() {
    LLVMOrcLLJITBuilderRef builder = LLVMOrcCreateLLJITBuilder();
    if (LLVMErrorRef e = LLVMOrcCreateLLJIT(&jit_, builder))
      throw Error(fmt::format("codegen: cannot start LLVM's JIT: {}", take_error(e)));
    LLVMOrcDefinitionGeneratorRef gen = nullptr;
    if (LLVMErrorRef e = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&gen, LLVMOrcLLJITGetGlobalPrefix(jit_),
                                                                              nullptr, nullptr))
      throw Error(fmt::format("codegen: cannot search the process's symbols: {}", take_error(e)));
    LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(jit_), gen);
  }

  std::string triple_, cpu_, features_, target_id_;
  LLVMTargetRef target_ = nullptr;
  MathTarget math_;
  std::mutex mu_;
  LLVMOrcLLJITRef jit_ = nullptr;
};

}  // namespace

Backend& cpu_backend() {
  static LlvmBackend* backend = new LlvmBackend();  // never destroyed: kernels outlive statics
  return *backend;
}

}  // namespace kiln::codegen
