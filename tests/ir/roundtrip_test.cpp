// tests/ir/roundtrip_test.cpp -- print(parse(text)) == text for every op family, literal kind
// and graph feature; parse errors name file:line:col.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "runtime/cuda.h"
#include "tests/ops/op_specs_registered.h"

namespace kiln::ir {
namespace {

const char* const kUnary = R"(
graph @unary(%0: f32[2,3], %1: bool[2,3]) -> (f32[2,3], bool[2,3]) {
  %2 = neg %0 : f32[2,3]
  %3 = abs %2 : f32[2,3]
  %4 = sign %3 : f32[2,3]
  %5 = exp %4 : f32[2,3]
  %6 = log %5 : f32[2,3]
  %7 = log1p %6 : f32[2,3]
  %8 = expm1 %7 : f32[2,3]
  %9 = sqrt %8 : f32[2,3]
  %10 = rsqrt %9 : f32[2,3]
  %11 = reciprocal %10 : f32[2,3]
  %12 = sin %11 : f32[2,3]
  %13 = cos %12 : f32[2,3]
  %14 = tanh %13 : f32[2,3]
  %15 = erf %14 : f32[2,3]
  %16 = sigmoid %15 : f32[2,3]
  %17 = relu %16 : f32[2,3]
  %18 = gelu %17 : f32[2,3]
  %19 = gelu_tanh %18 : f32[2,3]
  %20 = silu %19 : f32[2,3]
  %21 = floor %20 : f32[2,3]
  %22 = ceil %21 : f32[2,3]
  %23 = round %22 : f32[2,3]
  %24 = logical_not %1 : bool[2,3]
  return %23, %24
}
)";

// Immediates of every kind: int, float (with -0.0, inf, -inf, nan, exponents), bool.
const char* const kBinary = R"(
graph @binary(%0: f32[4], %1: f32[4], %2: i64[4], %3: bool[4]) -> (f32[4], i64[4], bool[4], f32[4]) {
  %4 = add %0, %1 : f32[4]
  %5 = sub %4, 2.5 : f32[4]
  %6 = mul -0.0, %5 : f32[4]
  %7 = div %6, inf : f32[4]
  %8 = pow %7, 2 : f32[4]
  %9 = maximum %8, -inf : f32[4]
  %10 = minimum %9, nan : f32[4]
  %11 = eq %10, %1 : bool[4]
  %12 = ne %2, -9223372036854775807 : bool[4]
  %13 = lt %0, 1e-07 : bool[4]
  %14 = le %0, 1e+20 : bool[4]
  %15 = gt %2, 3 : bool[4]
  %16 = ge %0, %1 : bool[4]
  %17 = logical_and %11, true : bool[4]
  %18 = logical_or false, %12 : bool[4]
  %19 = where %3, %0, 0.5 : f32[4]
  %20 = clamp %2, -1, 1 : i64[4]
  %21 = relu_grad %19, %1 : f32[4]
  return %19, %20, %18, %21
}
)";

const char* const kReduce = R"(
graph @reduce(%0: f32[2,3,4]) -> (f32[3], i64[], f16[2,3,4]) {
  %1 = sum %0 {axes=[0,2], keepdim=false} : f32[3]
  %2 = prod %0 {axes=[-2], keepdim=true} : f32[2,1,4]
  %3 = amax %0 {axes=[], keepdim=false} : f32[]
  %4 = amin %0 {axes=[2], keepdim=false} : f32[2,3]
  %5 = argmax %0 {axes=[1], keepdim=false} : i64[2,4]
  %6 = argmin %0 {axes=[], keepdim=false} : i64[]
  %7 = cast %0 {dtype=f16} : f16[2,3,4]
  return %1, %6, %7
}
)";

// Scans and orderings: the attributes k, descending and reverse; iota and numel, which have no
// operands.
const char* const kScan = R"(
graph @scan(%0: f32[3,5], %1: i32[3,5]) -> (f32[3,5], i64[3,5], i64[2,5], i64[3,5], i64[5], f32[]) {
  %2 = cumsum %0 {dim=1, reverse=false} : f32[3,5]
  %3 = cumsum %1 {dim=-1, reverse=true} : i64[3,5]
  %4 = argsort %0 {dim=0, descending=true} : i64[3,5]
  %5 = topk_indices %0 {dim=0, k=2, descending=false} : i64[2,5]
  %6 = iota {shape=[5], device=cpu} : i64[5]
  %7 = numel {shape=[3,5], dtype=f32} : f32[]
  return %2, %4, %5, %3, %6, %7
}
)";

const char* const kMovement = R"(
graph @movement(%0: f32[2,3], %1: i64[2,3], %2: i64[2]) -> (f32[4,2,2], f32[2,6]) {
  %3 = reshape %0 {shape=[3,2]} : f32[3,2]
  %4 = permute %3 {axes=[1,0]} : f32[2,3]
  %5 = slice %4 {dim=1, start=0, stop=3, step=2} : f32[2,2]
  %6 = expand %5 {shape=[4,2,2]} : f32[4,2,2]
  %7 = copy %6 : f32[4,2,2]
  %8 = cat %0, %4 {dim=0} : f32[4,3]
  %9 = gather %0, %1 {dim=1} : f32[2,3]
  %10 = index_select %0, %2 {dim=0} : f32[2,3]
  %11 = scatter_add %0, %1, %9 {dim=1} : f32[2,3]
  %12 = pad %0 {pads=[1,2], value=-1.5} : f32[2,6]
  %13 = index_add %0, %2, %10 {dim=0} : f32[2,3]
  %14 = to_device %0 {device=cpu} : f32[2,3]
  return %7, %12
}
)";

const char* const kLoops = R"(
graph @loops(%0: f32[1,2,5,5], %1: f32[4,2,3,3], %2: f32[5,7], %3: f32[7,2]) -> (f32[5,2]) {
  %4 = conv2d %0, %1 {stride=[1,1], padding=[1,1], dilation=[1,1], groups=1} : f32[1,4,5,5]
  %5 = max_pool2d %4 {kernel=[2,2], stride=[2,2], padding=[0,0], ceil_mode=false} : f32[1,4,2,2]
  %6 = avg_pool2d %5 {kernel=[2,2], stride=[1,1], padding=[1,1], count_include_pad=true} : f32[1,4,3,3]
  %7 = matmul %2, %3 : f32[5,2]
  %8 = conv2d_input_grad %4, %1 {shape=[1,2,5,5], stride=[1,1], padding=[1,1], dilation=[1,1], groups=1} : f32[1,2,5,5]
  %9 = conv2d_weight_grad %0, %4 {shape=[4,2,3,3], stride=[1,1], padding=[1,1], dilation=[1,1], groups=1} : f32[4,2,3,3]
  %10 = max_pool2d_indices %4 {kernel=[2,2], stride=[2,2], padding=[0,0], ceil_mode=true} : i64[1,4,3,3]
  %11 = max_pool2d_backward %4, %5 {kernel=[2,2], stride=[2,2], padding=[0,0], ceil_mode=false} : f32[1,4,5,5]
  %12 = avg_pool2d_backward %6 {shape=[1,4,2,2], kernel=[2,2], stride=[1,1], padding=[1,1], count_include_pad=true} : f32[1,4,2,2]
  %13 = sum %7 {axes=[0], keepdim=false} : f32[2]
  %14 = addmm %13, %2, %3 : f32[5,2]
  %15 = addmm_relu %13, %2, %3 : f32[5,2]
  %16 = addmm_gelu_tanh %13, %2, %3 : f32[5,2]
  %17 = attention %2, %2, %2 {scale=0.5, dropout_p=0, causal=true} : f32[5,7]
  %18 = attention_backward %2, %2, %2, %17, %17 {scale=0.5, dropout_p=0, causal=true} : f32[105]
  return %7
}
)";

const char* const kConstants = R"(
graph @constants() -> (f32[2], f64[2], f16[2], bf16[2], i32[2], i64[2], u8[2], bool[2]) {
  %0 = const [1.5, -0.0] : f32[2]
  %1 = const [0.1, 1e+300] : f64[2]
  %2 = const [0.5, -2.0] : f16[2]
  %3 = const [inf, -inf] : bf16[2]
  %4 = const [-2147483648, 7] : i32[2]
  %5 = const [-9223372036854775808, 9223372036854775807] : i64[2]
  %6 = const [0, 255] : u8[2]
  %7 = const [true, false] : bool[2]
  %8 = const nan : f32[]
  %9 = const [] : f32[0]
  return %0, %1, %2, %3, %4, %5, %6, %7
}
)";

// Symbolic dims, named and unnamed params, assigns, locations. (Several results: above.)
const char* const kStep = R"(
graph @step(%0: f32[B,784]) params(%1: f32[784,10] "fc.w", %2: f32[10], %3: f32[]) -> (f32[]) {
  %4 = matmul %0, %1 : f32[B,10] loc("train.cpp":12)
  %5 = add %4, %2 : f32[B,10] loc("train.cpp":12)
  %6 = amax %5 {axes=[1], keepdim=true} : f32[B,1] loc("nn/loss.cpp":40)
  %7 = sub %5, %6 : f32[B,10]
  %8 = sum %7 {axes=[], keepdim=false} : f32[]
  %9 = mul %8, 0.001 : f32[]
  %10 = sub %3, %9 : f32[]
  assign %3, %10 loc("train.cpp":20)
  return %9
}
)";

const char* const kEmpty = "\ngraph @empty() -> () {\n  return\n}\n";

// Random draws read the generator's state (seed, offset) as their operand.
const char* const kDraws = R"(
graph @draws(%0: i64[2]) -> (f32[2,3], f64[4]) {
  %1 = rand %0 {shape=[2,3], dtype=f32} : f32[2,3]
  %2 = add %0, 6 : i64[2]
  %3 = randn %2 {shape=[4], dtype=f64} : f64[4]
  return %1, %3
}
)";

// A collective names its process group by number and how the ranks' values combine.
const char* kCollective = R"(
graph @reduce_grads(%0: f32[8], %1: i64[3]) -> (f32[8], i64[3]) {
  %2 = all_reduce %0 {group=1, reduce=sum} : f32[8]
  %3 = all_reduce %1 {group=2, reduce=max} : i64[3]
  return %2, %3
}
)";

// Each text starts after its raw string's first newline.
const char* const kRecurrent = R"(
graph @recurrent(%0: f32[2,1,2], %1: f32[3,2], %2: f32[3,1]) -> (f32[13]) {
  %3 = rnn %0, %1, %2 {lstm=false, hidden_size=1, num_layers=1, bidirectional=false} : f32[1,3]
  %4 = rnn_backward %0, %1, %2, %3, %3 {lstm=false, hidden_size=1, num_layers=1, bidirectional=false} : f32[13]
  return %4
}
)";

// Registered ops print by their own names, with their schemas' attributes, every one of them
// (defaults too, so equal calls print equal text); symbolic dims pass through their rules.
const RegisteredOp& every_attribute_op() {
  static const RegisteredOp& op =
      register_op(
          "kiln_test::every_attribute(Tensor x, int i=1, float f=0.5, bool b=False, int[] is=[1, 2], "
          "float[] fs=[], str s='hi', ScalarType d=f32) -> Tensor")
          .rule([](const OpCall& c) { return c.input(0).type(); });
  return op;
}
const bool kRegisteredForRoundTrip = (test::mul_add_op(), every_attribute_op(), true);

const char* const kRegistered = R"(
graph @registered(%0: f32[B,3], %1: f32[B,3]) -> (f32[B,3], f32[B,3]) {
  %2 = kiln_test::mul_add %0, %1 {k=3} : f32[B,3]
  %3 = kiln_test::every_attribute %2 {i=-4, f=0.25, b=true, is=[1,-2], fs=[0.5,inf], s="a \"q\"", d=bf16} : f32[B,3]
  return %2, %3
}
)";

const std::vector<const char*> kGraphs = {kUnary + 1,      kBinary + 1,    kReduce + 1,    kScan + 1,  kMovement + 1,
                                          kLoops + 1,      kConstants + 1, kStep + 1,      kEmpty + 1, kDraws + 1,
                                          kCollective + 1, kRecurrent + 1, kRegistered + 1};

TEST(RoundTrip, PrintsBackTheTextItParsed) {
  for (const char* text : kGraphs) {
    Graph g = parse(text, "roundtrip.ir");
    EXPECT_EQ(print(g), text);
    EXPECT_NO_THROW(verify(g)) << text;
  }
}

TEST(RoundTrip, CoversEveryOp) {
  for (int i = 0; i < kNumOps; ++i) {
    auto id = static_cast<OpId>(i);  // a registered op prints its own name
    std::string use = std::string(" = ") + (id == OpId::Registered ? "kiln_test::mul_add" : op_name(id)) + " ";
    bool found = false;
    for (const char* text : kGraphs) found = found || std::string(text).find(use) != std::string::npos;
    EXPECT_TRUE(found) << op_name(static_cast<OpId>(i)) << " appears in no round-trip graph";
  }
}

TEST(RoundTrip, KeepsLiteralBits) {
  Graph g = parse(kConstants);
  EXPECT_TRUE(std::signbit(g.nodes[0].constant.to_vector<float>()[1]));
  EXPECT_EQ(g.nodes[5].constant.to_vector<int64_t>()[0], INT64_MIN);
  EXPECT_TRUE(std::isnan(g.nodes[8].constant.to_vector<float>()[0]));
  Graph b = parse(kBinary);
  EXPECT_TRUE(std::signbit(b.nodes[2].attrs.imm[0].to_double()));
  EXPECT_EQ(b.nodes[2].attrs.imm[0].kind(), Scalar::Kind::Float);
  EXPECT_EQ(b.nodes[4].attrs.imm[1].kind(), Scalar::Kind::Int);
  EXPECT_EQ(b.nodes[13].attrs.imm[1].kind(), Scalar::Kind::Bool);
}

TEST(RoundTrip, DropsLocationsWhenAsked) {
  std::string text = print(parse(kStep), {.locations = false});
  EXPECT_EQ(text.find("loc("), std::string::npos);
  EXPECT_EQ(print(parse(text), {.locations = false}), text);
}

TEST(RoundTrip, RenumbersValuesDensely) {
  Graph g = parse("graph @f(%x: f32[2]) -> (f32[2]) {\n  %y = exp %x : f32[2]\n  return %y\n}\n");
  EXPECT_EQ(print(g), "graph @f(%0: f32[2]) -> (f32[2]) {\n  %1 = exp %0 : f32[2]\n  return %1\n}\n");
}

// Device annotations read back as the types TensorType::str() writes.
TEST(RoundTrip, ReadsDevices) {
  const char* text =
      "graph @f(%0: f32[2,3]@cuda:0, %1: i64[]@cuda:7, %2: f32[2]) -> (f32[2,3]@cuda:0) {\n"
      "  %3 = exp %0 : f32[2,3]@cuda:0\n"
      "  return %3\n"
      "}\n";
  Graph g = parse(text);
  EXPECT_EQ(g.type(g.inputs[0]).device, cuda::device(0));
  EXPECT_EQ(g.type(g.inputs[1]).device, cuda::device(7));
  EXPECT_EQ(g.type(g.inputs[2]).device, cpu);
  EXPECT_EQ(print(g), text);
  // @cpu is the default, so it prints as nothing.
  Graph c = parse("graph @f(%0: f32[2]@cpu) -> (f32[2]) {\n  return %0\n}\n");
  EXPECT_EQ(c.type(c.inputs[0]).device, cpu);
}

// Names and file names hold any bytes: quotes, backslashes, newlines, UTF-8.
TEST(RoundTrip, EscapesStrings) {
  Graph g = parse(
      "graph @f(%0: f32[2]) params(%1: f32[2] \"w\") -> (f32[2]) {\n  %2 = add %0, %1 : f32[2]\n  return %2\n}\n");
  g.name = "train step \"v2\"";
  g.param_names[0] = "layers.0\\w\n\xc3\xa9";
  g.nodes[0].loc.file = "/src/my \"dir\"/a.cpp";
  g.nodes[0].loc.line = 12;
  std::string text = print(g);
  EXPECT_NE(text.find("@\"train step \\\"v2\\\"\"("), std::string::npos) << text;
  EXPECT_NE(text.find("\"layers.0\\\\w\\x0a\\xc3\\xa9\""), std::string::npos) << text;
  Graph back = parse(text);
  EXPECT_EQ(back.name, g.name);
  EXPECT_EQ(back.param_names[0], g.param_names[0]);
  EXPECT_EQ(back.nodes[0].loc.file, g.nodes[0].loc.file);
  EXPECT_EQ(print(back), text);
}

// The whole message, so the position is checked exactly.
std::string parse_error(const std::string& text) {
  try {
    parse(text, "net.ir");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ParseErrors, NameFileLineAndColumn) {
  EXPECT_EQ(parse_error("graph @f(%0: f32[2]) -> (f32[2]) {\n  %1 = sine %0 : f32[2]\n  return %1\n}\n"),
            "net.ir:2:8: unknown op 'sine'");
  EXPECT_EQ(parse_error("graph @f(%0: f32[2]) -> (f32[2]) {\n  %1 = exp %0 : g32[2]\n  return %1\n}\n"),
            "net.ir:2:17: unknown dtype 'g32'");
  EXPECT_EQ(parse_error("graph @f(%0: f32[2]) -> (f32[2]) {\n  return %3\n}\n"),
            "net.ir:2:10: use of undefined value %3");
  EXPECT_EQ(parse_error("graph @f(%0: f32[2]) -> (f32[2]) {\n  %1 = exp %0 : f32[2]\n"),
            "net.ir:3:1: expected 'return' before the end of the input");
  EXPECT_EQ(parse_error("graph @f(%0: f32[2]) -> (f32[2]) {\n  %1 = exp %0 : f32[2] loc(\"a.cpp\n"),
            "net.ir:2:28: unterminated string");
  EXPECT_EQ(parse_error("graph @f(%0: f32[2]) -> (f32[2]) {\n  %1 = exp %0 # f32[2]\n"),
            "net.ir:2:15: unexpected character '#'");
  EXPECT_EQ(parse_error("graph @f(%0: f32[2], %0: f32[2]) -> (f32[2]) {\n  return %0\n}\n"),
            "net.ir:1:22: %0 is defined twice");
  EXPECT_EQ(parse_error("graph @f(%0: f32[2]@tpu:0) -> (f32[2]) {\n  return %0\n}\n"),
            "net.ir:1:20: unknown device 'tpu:0' (expected cpu, cuda:N or plugin:N)");
  EXPECT_EQ(parse_error("graph @f(%0: f32[2]@cuda:40000) -> (f32[2]) {\n  return %0\n}\n"),
            "net.ir:1:20: unknown device 'cuda:40000' (expected cpu, cuda:N or plugin:N)");
  EXPECT_EQ(parse_error("graph @f(%0: f32[2]@cuda) -> (f32[2]) {\n  return %0\n}\n"),
            "net.ir:2:3: result 0 is declared f32[2] but returns f32[2]@cuda:0");  // @cuda is cuda:0
  EXPECT_EQ(parse_error("graph @f(%0: f32[2]@cuda:x) -> (f32[2]) {\n  return %0\n}\n"),
            "net.ir:1:26: expected a device index, found 'x'");
  EXPECT_EQ(
      parse_error("graph @f(%0: f32[2]) -> (f32[2]) {\n  %1 = to_device %0 {device=gpu} : f32[2]\n  return %1\n}\n"),
      "net.ir:2:29: unknown device 'gpu' (expected cpu, cuda:N or plugin:N)");
  EXPECT_EQ(parse_error("graph @f(%0: f32[2]) params(%1: f32[2] \"a\\qb\") -> (f32[2]) {\n  return %0\n}\n"),
            "net.ir:1:42: unknown escape in a string (the text knows \\\", \\\\ and \\xNN)");
  EXPECT_EQ(parse_error("graph @f(%0: f32[2]) params(%1: f32[2] \"a\\x4\") -> (f32[2]) {\n  return %0\n}\n"),
            "net.ir:1:42: unknown escape in a string (the text knows \\\", \\\\ and \\xNN)");
  EXPECT_EQ(parse_error("graph @\"\"(%0: f32[2]) -> (f32[2]) {\n  return %0\n}\n"),
            "net.ir:1:7: expected a name after '@'");
}

}  // namespace
}  // namespace kiln::ir
