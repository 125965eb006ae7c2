// tests/cuda/codegen_test.cpp -- groups the fuse pass forms, lowered to CUDA C (codegen/cuda),
// compiled by the host NVRTC and run on the host CUDA, against the same graph run op by op
// with the CPU's eager kernels: softmax and layer_norm from primitives (reductions feeding
// later ops, a value stored between passes), reductions over leading, middle and all dims,
// f16 and integer work, NaN in max, immediates as text and as arguments, strided and
// broadcast operands. The toolkit's NVRTC compiles every one of these kernels for sm_80 and
// sm_90, with and without combines run by their last block (Nvrtc.CompilesTheGroupsKernels,
// ctest cuda_nvrtc).
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <string>
#include <vector>

#include "codegen/cuda/emit.h"
#include "cuda/group.h"
#include "cuda/nvrtc.h"
#include "ir/graph.h"
#include "ir/passes.h"
#include "jit/executable.h"
#include "jit/run.h"
#include "tests/cuda/cuda_test.h"
#include "tests/ops/reference.h"

namespace kiln {
namespace {

using test::on_host_cuda;

struct Group {
  std::string name, text;  // a graph whose fused form is one group
};
void PrintTo(const Group& g, std::ostream* os) { *os << g.name; }

const Group kGroups[] = {
    {"softmax", R"(graph @softmax(%0: f32[5,37]) -> (f32[5,37]) {
  %1 = amax %0 {axes=[1], keepdim=true} : f32[5,1]
  %2 = sub %0, %1 : f32[5,37]
  %3 = exp %2 : f32[5,37]
  %4 = sum %3 {axes=[1], keepdim=true} : f32[5,1]
  %5 = div %3, %4 : f32[5,37]
  return %5
})"},
    {"layer_norm", R"(graph @ln(%0: f32[4,300], %1: f32[300], %2: f32[300]) -> (f32[4,300]) {
  %3 = sum %0 {axes=[1], keepdim=true} : f32[4,1]
  %4 = mul %3, 0.0033333333333333335 : f32[4,1]
  %5 = sub %0, %4 : f32[4,300]
  %6 = mul %5, %5 : f32[4,300]
  %7 = sum %6 {axes=[1], keepdim=true} : f32[4,1]
  %8 = mul %7, 0.0033333333333333335 : f32[4,1]
  %9 = add %8, 1e-05 : f32[4,1]
  %10 = rsqrt %9 : f32[4,1]
  %11 = mul %5, %10 : f32[4,300]
  %12 = expand %1 {shape=[4,300]} : f32[4,300]
  %13 = mul %11, %12 : f32[4,300]
  %14 = expand %2 {shape=[4,300]} : f32[4,300]
  %15 = add %13, %14 : f32[4,300]
  return %15
})"},
    {"sum_leading", R"(graph @s(%0: f32[9,6]) -> (f32[6]) {
  %1 = mul %0, %0 : f32[9,6]
  %2 = sum %1 {axes=[0], keepdim=false} : f32[6]
  return %2
})"},
    {"max_middle", R"(graph @m(%0: f64[3,50,4]) -> (f64[3,1,4]) {
  %1 = abs %0 : f64[3,50,4]
  %2 = amax %1 {axes=[1], keepdim=true} : f64[3,1,4]
  return %2
})"},
    {"sum_all_i64", R"(graph @s(%0: i64[7,300]) -> (i64[]) {
  %1 = mul %0, 3 : i64[7,300]
  %2 = sum %1 {axes=[0,1], keepdim=false} : i64[]
  return %2
})"},
    {"f16_chain", R"(graph @h(%0: f16[6,33], %1: f16[33]) -> (f16[6,33], f32[6,33]) {
  %2 = expand %1 {shape=[6,33]} : f16[6,33]
  %3 = mul %0, %2 : f16[6,33]
  %4 = tanh %3 : f16[6,33]
  %5 = cast %4 {dtype=f32} : f32[6,33]
  %6 = mul %5, 2.5 : f32[6,33]
  return %4, %6
})"},
    {"u8_bool", R"(graph @u(%0: u8[40], %1: u8[40]) -> (u8[40], bool[40]) {
  %2 = add %0, %1 : u8[40]
  %3 = gt %2, %0 : bool[40]
  return %2, %3
})"},
    {"casts", R"(graph @c(%0: f32[64]) -> (u8[64], i32[64], bool[64], bf16[64]) {
  %1 = mul %0, 100.0 : f32[64]
  %2 = cast %1 {dtype=u8} : u8[64]
  %3 = cast %1 {dtype=i32} : i32[64]
  %4 = cast %1 {dtype=bool} : bool[64]
  %5 = cast %1 {dtype=bf16} : bf16[64]
  return %2, %3, %4, %5
})"},
};

// Inputs for a graph: random values of each input's type, some of them special.
std::vector<Tensor> inputs_for(const ir::Graph& g) {
  std::vector<Tensor> in;
  for (uint32_t v : g.inputs) {
    const TensorType& t = g.type(v);
    Tensor x = is_float(t.dtype)
                   ? (randn(t.shape) * 3.0).to(t.dtype)
                   : randint(t.dtype == DType::U8 ? 0 : -50, t.dtype == DType::U8 ? 255 : 50, t.shape, t.dtype);
    in.push_back(x);
  }
  return in;
}

// The one fused node of `g` after the fuse pass.
const ir::Node& only_group(const ir::Graph& fused) {
  const ir::Node* found = nullptr;
  for (const ir::Node& n : fused.nodes)
    if (n.kind == ir::NodeKind::Fused) {
      EXPECT_EQ(found, nullptr) << "two groups:\n" << ir::print(fused);
      found = &n;
    }
  EXPECT_NE(found, nullptr) << "no group:\n" << ir::print(fused);
  return *found;
}

std::vector<Tensor> run_on_cuda(const ir::Node& group, const std::vector<Tensor>& in, bool eager) {
  std::vector<Tensor> dev, outs;
  for (const Tensor& x : in) dev.push_back(x.to(cuda::device(0)));
  for (uint32_t o : group.body->outputs) {
    TensorType t = group.body->type(o);
    t.device = cuda::device(0);
    outs.push_back(Tensor::empty(t));
  }
  cuda::run_group(group, dev, outs, eager);
  std::vector<Tensor> host;
  for (const Tensor& y : outs) host.push_back(y.to(cpu));
  return host;
}

class CudaGroup : public ::testing::TestWithParam<Group> {};

TEST_P(CudaGroup, RunsAsTheCpuRunsItOpByOp) {
  REQUIRE_CUDA();
  const Group& c = GetParam();
  ir::Graph g = ir::parse(c.text);
  ir::Graph fused = ir::fuse(g);
  const ir::Node& group = only_group(fused);
  manual_seed(7);
  std::vector<Tensor> in = inputs_for(g);
  if (c.name == "max_middle") {  // NaN wins
    in[0] = in[0].clone();
    in[0][1][17][2].fill_(NAN);
  }
  std::vector<Tensor> want = jit::run_graph(g, in, {});
  for (bool args : {false, true}) {
    SCOPED_TRACE(args ? "eager: immediates and strides as arguments" : "immediates and layout in the text");
    std::vector<Tensor> got = run_on_cuda(group, in, args);
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) {
      SCOPED_TRACE("output " + std::to_string(k));
      std::vector<double> w = want[k].to_vector<double>();
      EXPECT_TRUE(test::all_close(got[k], w, want[k].shape(), test::tolerance(got[k].dtype())));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Groups, CudaGroup, ::testing::ValuesIn(kGroups),
                         [](const auto& info) { return info.param.name; });

// Strided and broadcast operands, as the layout of a real call gives them.
TEST(CudaGroupLayout, ReadsTransposedAndBroadcastOperandsInPlace) {
  REQUIRE_CUDA();
  ir::Graph g = ir::parse(R"(graph @f(%0: f32[8,5], %1: f32[5]) -> (f32[8,5]) {
  %2 = expand %1 {shape=[8,5]} : f32[8,5]
  %3 = mul %0, %2 : f32[8,5]
  %4 = exp %3 : f32[8,5]
  return %4
})");
  ir::Graph fused = ir::fuse(g);
  const ir::Node& group = only_group(fused);
  manual_seed(3);
  Tensor base = randn({5, 8}).to(cuda::device(0));
  Tensor a = base.t();  // [8,5], strides [1,8]
  Tensor b = randn({5}).to(cuda::device(0));
  Tensor out = Tensor::empty({f32, {8, 5}, cuda::device(0)});
  std::vector<Tensor> ins = {a, b};
  cuda::run_group(group, ins, {&out, 1}, false);
  Tensor want = exp(base.to(cpu).t() * b.to(cpu));
  EXPECT_TRUE(test::all_close(out.to(cpu), want.to_vector<double>(), {8, 5}));
}

// The toolkit's NVRTC compiles the same kernels for the architectures kiln supports.
TEST(Nvrtc, CompilesTheGroupsKernels) {
  if (on_host_cuda() && std::getenv("KILN_CUDA_NVRTC") && *std::getenv("KILN_CUDA_NVRTC"))
    GTEST_SKIP() << "run by ctest cuda_nvrtc with the toolkit's NVRTC";
  if (!cuda::nvrtc_available()) GTEST_SKIP() << cuda::nvrtc_unavailable_reason();
  for (const Group& c : kGroups) {
    SCOPED_TRACE(c.name);
    ir::Graph g = ir::parse(c.text);
    ir::Graph fused = ir::fuse(g);
    const ir::Node& group = only_group(fused);
    std::vector<Dims> shapes, strides;
    for (uint32_t v : group.body->inputs) {
      shapes.push_back(group.body->type(v).shape);
      strides.push_back(contiguous_strides(shapes.back()));
    }
    jit::KernelArgs ka = jit::kernel_args(group, shapes, strides);
    for (bool args : {false, true})
      for (codegen::CudaRows rows_by : {codegen::CudaRows::Block, codegen::CudaRows::Thread}) {
        codegen::CudaEmitOptions o;
        o.immediates_as_args = o.generic_strides = args;
        o.rows_by = rows_by;
        std::string src = codegen::emit_cuda(*group.body, ka.layout, "kiln_group", o);
        for (int arch : {80, 90}) EXPECT_FALSE(cuda::compile_cubin(src, arch, "kiln_group").empty());
        // Its batch form (a multi-tensor apply), in 32-bit indices too.
        for (bool index32 : {false, true}) {
          codegen::CudaEmitOptions batch = o;
          batch.segments = 8, batch.index32 = index32;
          src = codegen::emit_cuda(*group.body, ka.layout, "kiln_group", batch);
          EXPECT_NE(src.find("const Args a = kiln_batch.seg[kiln_lo];"), std::string::npos);
          for (int arch : {80, 90}) EXPECT_FALSE(cuda::compile_cubin(src, arch, "kiln_group").empty());
        }
        if (ka.layout.reduced == 0) continue;
        // The same kernel with a last block that runs combines (the group's own body stands
        // in for them: the text is what is compiled), one per way of mapping rows.
        o.combines = {{group.body.get(), ka.layout, codegen::CudaRows::Thread},
                      {group.body.get(), ka.layout, codegen::CudaRows::Block}};
        src = codegen::emit_cuda(*group.body, ka.layout, "kiln_group", o);
        EXPECT_NE(src.find("kiln_combine1(a.combine1, 0, 1);"), std::string::npos);
        for (int arch : {80, 90}) EXPECT_FALSE(cuda::compile_cubin(src, arch, "kiln_group").empty());
      }
  }
}

}  // namespace
}  // namespace kiln
