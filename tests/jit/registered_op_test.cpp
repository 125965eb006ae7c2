// tests/jit/registered_op_test.cpp -- registered ops (runtime/registered_op.h) on the CPU: the
// schema's reader, calls checked against it, a rule that disagrees with its kernel, a missing
// derivative or kernel; then in a trace: one IR node named by the op, fused around, its
// derivative in the compiled backward and in a whole training step; the verifier running its
// rule; and saved modules, which name it with its schema and are refused where the op is
// missing or has another schema. (The every-op suite checks kiln_test::mul_add against its
// double-precision reference and by finite differences, on the CPU and the host CUDA.)
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "jit/save.h"
#include "jit_test_util.h"
#include "nn/layers.h"
#include "nn/module.h"
#include "runtime/files.h"
#include "tests/ops/op_specs_registered.h"

namespace kiln {
namespace {

using test::expect_error;
using test::expect_same;
using test::mul_add_op;

TEST(OpSchema, ReadsTorchLibrarysSchemasAndWritesOneSpelling) {
  OpSchema s = parse_op_schema(
      "mylib::rotary( Tensor x,Tensor cos, Tensor sin, bool interleaved = False, int[] dims=[ -1, 2 ],"
      " float eps=1e-5, float[] w=[1, 0.5], str mode='fast', ScalarType t=bf16, int k=-3) ->  Tensor");
  EXPECT_EQ(s.qualified_name(), "mylib::rotary");
  EXPECT_EQ(s.num_tensors(), 3u);
  EXPECT_EQ(s.str(),
            "mylib::rotary(Tensor x, Tensor cos, Tensor sin, bool interleaved=False, int[] dims=[-1, 2], "
            "float eps=1e-05, float[] w=[1.0, 0.5], str mode=\"fast\", ScalarType t=bf16, int k=-3) -> Tensor");
  EXPECT_EQ(parse_op_schema(s.str()).str(), s.str());
  EXPECT_TRUE(is_registered_op_name("a_1::b2"));
  EXPECT_FALSE(is_registered_op_name("a::"));
  EXPECT_FALSE(is_registered_op_name("add"));
}

TEST(OpSchema, BadSchemasSayWhatAndWhere) {
  const std::pair<const char*, std::vector<std::string>> kBad[] = {
      {"rotary(Tensor x) -> Tensor", {"expected '::'", "column 7"}},
      {"my lib::op(Tensor x) -> Tensor", {"expected '::'"}},
      {"m::op(Tensor x) -> (Tensor, Tensor)", {"returns one Tensor", "tuple"}},
      {"m::op(Tensor x) -> int", {"returns one Tensor, not 'int'"}},
      {"m::op(Tensor(a!) x) -> Tensor", {"aliased", "not supported"}},
      {"m::op(Tensor? x) -> Tensor", {"optional"}},
      {"m::op(Tensor x, complex y) -> Tensor", {"unknown type 'complex'", "column 17"}},
      {"m::op(Tensor x, Tensor x) -> Tensor", {"'x' named twice"}},
      {"m::op(Tensor x=1) -> Tensor", {"Tensor argument takes no default"}},
      {"m::op(Tensor x, int k=2, int j) -> Tensor", {"'j' has no default but follows one"}},
      {"m::op(Tensor x, int k=2.5) -> Tensor", {"expected an integer, found '2.5'"}},
      {"m::op(Tensor x, int k=99999999999999999999) -> Tensor", {"expected an integer"}},
      {"m::op(Tensor x, bool b=yes) -> Tensor", {"expected True or False"}},
      {"m::op(Tensor x, str s='a\\b') -> Tensor", {"printable characters only"}},
      {"m::op(Tensor x, str s='abc) -> Tensor", {"unterminated string"}},
      {"m::op(Tensor x, ScalarType t=f128) -> Tensor", {"unknown dtype 'f128'"}},
      {"m::op(int k) -> Tensor", {"takes no Tensor"}},
      {"m::op(Tensor x) -> Tensor extra", {"unexpected text"}},
      {"m::op(Tensor x", {"expected ')'"}},
      {"", {"expected a namespace"}},
  };
  for (const auto& [text, parts] : kBad) {
    SCOPED_TRACE(text);
    std::vector<std::string> want = {"register_op: bad schema"};
    want.insert(want.end(), parts.begin(), parts.end());
    bool threw = false;
    try {
      parse_op_schema(text);
    } catch (const Error& e) {
      threw = true;
      for (const std::string& p : want) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
    EXPECT_TRUE(threw);
  }
  expect_error([] { parse_op_schema("m::op(Tensor x" + std::string(5000, ' ') + ") -> Tensor"); },
               {"longer than 4096"});
  // Text within the bound whose one spelling is not: refused too, so what is written reads back.
  std::string tight = "m::o(Tensor " + std::string(4075, 'x') + ")->Tensor";
  ASSERT_EQ(tight.size(), 4096u);
  expect_error([&] { parse_op_schema(tight); }, {"longer than 4096 characters as written"});
}

TEST(RegisteredOp, IsCalledLikeABuiltInOpAndChecksItsArguments) {
  const RegisteredOp& op = mul_add_op();
  EXPECT_EQ(find_registered_op("kiln_test::mul_add"), &op);
  EXPECT_EQ(find_registered_op("kiln_test::nothing"), nullptr);
  Tensor a = randn({2, 3}), b = randn({2, 3});
  expect_same(op(a, b), a * 2 + b);
  expect_same(op(a, b, 5), a * 5 + b);
  expect_same(op.call({a}, {{"b", b}, {"k", int64_t{-1}}}), b - a);
  expect_error([&] { op(a); }, {"kiln_test::mul_add", "missing Tensor argument 'b'"});
  expect_error([&] { op(a, b, 2.5); }, {"kiln_test::mul_add", "argument 'k' is int, got float"});
  expect_error([&] { op(a, 3); }, {"kiln_test::mul_add", "argument 'b' is a Tensor, got int"});
  expect_error([&] { op(a, b, a); }, {"argument 'k' is int, got a Tensor"});
  expect_error([&] { op(a, b, 1, 2); }, {"takes 3 arguments, got 4"});
  expect_error([&] { op.call({a, b}, {{"j", 1}}); }, {"no argument named 'j'"});
  expect_error([&] { op.call({a, b, 1}, {{"k", 1}}); }, {"argument 'k' given twice"});
  // The rule's own errors name the op.
  expect_error([&] { op(a, randn({3, 2})); }, {"kiln_test::mul_add", "shape rule", "f32[2,3] and f32[3,2]"});
  expect_error([&] { op(a, b.to(f64)); }, {"kiln_test::mul_add", "one dtype and shape"});
  expect_error([] { register_op("kiln_test::mul_add(Tensor a) -> Tensor"); },
               {"kiln_test::mul_add is registered already", "int k=2"});
  EXPECT_EQ(op.schema_text(), "kiln_test::mul_add(Tensor a, Tensor b, int k=2) -> Tensor");
  // A list attribute holds at most what the IR reads back.
  static const RegisteredOp& lists = register_op("kiln_test::lists(Tensor x, int[] is=[]) -> Tensor")
                                         .rule([](const OpCall& c) { return c.input(0).type(); })
                                         .cpu([](const OpCall& c) { return c.input(0).clone(); });
  expect_same(lists(a, std::vector<int64_t>(4096, 1)), a);
  expect_error([&] { lists(a, std::vector<int64_t>(4097, 1)); },
               {"kiln_test::lists", "argument 'is' holds 4097 values, more than the 4096"});
  expect_error([&] { (void)OpCall(op, {}, {}).input(0); },
               {"kiln_test::mul_add: has 0 Tensor arguments, asked for argument 0"});
}

const RegisteredOp& disagreeing_op() {
  static const RegisteredOp& op = register_op("kiln_test::disagreeing(Tensor x) -> Tensor")
                                      .rule([](const OpCall& c) {
                                        return TensorType{f32, {2, 2}};
                                      })
                                      .cpu([](const OpCall& c) { return zeros({3}); });
  return op;
}

TEST(RegisteredOp, AKernelThatDisagreesWithItsRuleIsCaught) {
  expect_error([] { disagreeing_op()(randn({4})); }, {"kiln_test::disagreeing", "its cpu kernel returned f32[3]",
                                                      "its shape rule gives f32[2,2]", "inputs f32[4]", "must agree"});
}

TEST(RegisteredOp, AMissingKernelRuleOrDerivativeIsAnErrorNamingIt) {
  static const RegisteredOp& bare = register_op("kiln_test::bare(Tensor x) -> Tensor");
  expect_error([] { bare(randn({2})); }, {"kiln_test::bare", "no shape rule"});
  static const RegisteredOp& no_grad_op = register_op("kiln_test::no_derivative(Tensor x) -> Tensor")
                                              .rule([](const OpCall& c) { return c.input(0).type(); })
                                              .cpu([](const OpCall& c) { return c.input(0) * 2; });
  Tensor x = randn({2}).requires_grad_();
  Tensor y = no_grad_op(x);  // the kernel ran
  expect_same(y.detach(), x.detach() * 2);
  expect_error([&] { sum(y).backward(); }, {"kiln_test::no_derivative", "has no derivative"});
  // A kernel that returns one of its inputs gives a copy: the result is the op's own.
  static const RegisteredOp& identity = register_op("kiln_test::identity(Tensor x) -> Tensor")
                                            .rule([](const OpCall& c) { return c.input(0).type(); })
                                            .cpu([](const OpCall& c) { return c.input(0); });
  Tensor z = randn({3});
  Tensor same = identity(z);
  expect_same(same, z);
  EXPECT_NE(same.data_ptr(), z.data_ptr());
}

TEST(RegisteredOp, SecondDerivativesRunThroughADerivativeOfKilnOps) {
  Tensor a = randn({3}, f64).requires_grad_(), b = randn({3}, f64).requires_grad_();
  auto first = [&](std::span<const Tensor> in) {
    Tensor y = sum(mul_add_op()(in[0] * in[0], in[1], 3));
    Tensor g = autograd::grad({&y, 1}, {&in[0], 1}, {}, true, true)[0];
    return sum(g * g);
  };
  std::vector<Tensor> leaves = {a, b};
  EXPECT_EQ(autograd::gradcheck(first, leaves), "");
}

// sin, the op, exp: the pointwise ops around it fuse, the op stays one node named by itself.
Tensor around(const Tensor& x, const Tensor& y) { return exp(mul_add_op()(sin(x) * x, y, 3)) * 2 + 1; }

TEST(RegisteredOpTraced, IsOneNodeWithFusionAroundItAndMatchesEager) {
  manual_seed(11);
  auto fast = jit::trace(around, {randn({4, 5}), randn({4, 5})});
  Tensor x = randn({4, 5}).requires_grad_(), y = randn({4, 5}).requires_grad_();
  Tensor got = fast(x, y);
  std::string text = test::text_of(fast.graph());
  EXPECT_NE(text.find(" = kiln_test::mul_add %"), std::string::npos) << text;
  EXPECT_NE(text.find("{k=3}"), std::string::npos) << text;
  if (jit::fusion_enabled()) {
    EXPECT_GE(fast.stats().kernels, 2) << text;  // sin(x) * x before it; exp, * 2, + 1 after
    EXPECT_NE(text.find("fused"), std::string::npos) << text;
  }
  // The compiled backward runs the op's derivative.
  sum(got).backward();
  Tensor gx = x.grad(), gy = y.grad();
  x.zero_grad(), y.zero_grad();
  Tensor want = around(x, y);
  sum(want).backward();
  expect_same(got.detach(), want.detach());
  expect_same(gx, x.grad());
  expect_same(gy, y.grad());
  Tensor x64 = randn({2, 3}, f64).requires_grad_(), y64 = randn({2, 3}, f64).requires_grad_();
  auto fast64 = jit::trace(around, {x64, y64});
  std::vector<Tensor> leaves = {x64, y64};
  EXPECT_EQ(autograd::gradcheck([&](std::span<const Tensor> in) { return fast64(in[0], in[1]); }, leaves), "");
}

struct MulAddNet : nn::Module {
  nn::Linear fc1{6, 8}, fc2{8, 3};
  MulAddNet() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor operator()(const Tensor& x) {
    Tensor h = fc1(x);
    return fc2(relu(mul_add_op()(h, tanh(h), 2)));
  }
};

TEST(RegisteredOpTraced, AWholeTrainingStepMatchesEagerSteps) {
  manual_seed(12);
  MulAddNet eager, traced;
  ir::Graph step = test::expect_traced_steps_match_eager(eager, traced, 3);
  EXPECT_NE(test::text_of(step).find("kiln_test::mul_add"), std::string::npos);
}

TEST(RegisteredOpIr, TheVerifierRunsItsRuleAndTheParserKnowsItsName) {
  mul_add_op();
  const char* good = R"(
graph @g(%0: f32[B,3], %1: f32[B,3]) -> (f32[B,3]) {
  %2 = kiln_test::mul_add %0, %1 : f32[B,3]
  return %2
}
)";
  ir::Graph g = ir::parse(good + 1);
  ir::verify(g);
  // A left-out attribute takes its default, which the printer writes.
  EXPECT_NE(ir::print(g).find("kiln_test::mul_add %0, %1 {k=2} : f32[B,3]"), std::string::npos);
  std::string bad_type = R"(
graph @g(%0: f32[B,3], %1: f32[B,3]) -> (f32[B,4]) {
  %2 = kiln_test::mul_add %0, %1 : f32[B,4]
  return %2
}
)";
  expect_error([&] { ir::verify(ir::parse(bad_type)); },
               {"verify", "kiln_test::mul_add", "its type is f32[B,4] but kiln_test::mul_add gives f32[B,3]"});
  std::string mixed = std::string(good + 1);
  mixed.replace(mixed.find("%1: f32[B,3]"), 12, "%1: f64[B,3]");
  expect_error([&] { ir::verify(ir::parse(mixed)); }, {"kiln_test::mul_add", "one dtype and shape"});
  std::string unknown = std::string(good + 1);
  unknown.replace(unknown.find("kiln_test::mul_add"), 18, "kiln_test::mul_adx");
  expect_error([&] { ir::parse(unknown); }, {"unknown op 'kiln_test::mul_adx'", "registered", "--load"});
  std::string attr = std::string(good + 1);
  attr.replace(attr.find(" : f32[B,3]\n  return"), 0, " {j=1}");
  expect_error([&] { ir::parse(attr); }, {"kiln_test::mul_add takes no attribute 'j'"});
  std::string wrong = std::string(good + 1);
  wrong.replace(wrong.find(" : f32[B,3]\n  return"), 0, " {k=1.5}");
  expect_error([&] { ir::parse(wrong); }, {"1.5", "attribute 'k' of kiln_test::mul_add is int"});
  // A registered op runs on its own kernels: never inside a fused group.
  const char* fused = R"(
graph @f(%0: f32[3]) -> (f32[3]) {
  %1 = fused %0 : f32[3] {
    %0 = kiln_test::mul_add $0, $0 : f32[3]
    yield %0
  }
  return %1
}
)";
  expect_error([&] { ir::verify(ir::parse(fused + 1)); },
               {"a fused body holds no registered op", "kiln_test::mul_add runs on its own kernels"});
}

std::string temp_module(const char* tag) {
  return (std::filesystem::temp_directory_path() /
          (std::string("kiln_registered_") + tag + "_" + std::to_string(::getpid()) + ".kiln"))
      .string();
}

// The bytes of a saved module with every `from` (same length as `to`) replaced: the frames'
// lengths stay right, so the loader reads what was changed.
std::string replaced(std::string bytes, const std::string& from, const std::string& to) {
  EXPECT_EQ(from.size(), to.size());
  for (size_t at = bytes.find(from); at != std::string::npos; at = bytes.find(from, at + to.size()))
    bytes.replace(at, from.size(), to);
  return bytes;
}

TEST(RegisteredOpSaved, LoadsWhereTheOpIsRegisteredAndIsRefusedByNameElsewhere) {
  manual_seed(13);
  nn::Linear fc(4, 4);
  auto fn = [&](Tensor x) { return mul_add_op()(fc(x), x, 3); };
  NoGradGuard no_grad;
  jit::SaveOptions o;
  o.dynamic(0, 0, "B");
  std::string path = temp_module("ok");
  jit::Function fast = jit::trace(fn, {randn({2, 4})});
  fast(randn({2, 4}));
  jit::save(fast, path, o);
  std::string bytes = files::read_bounded(path, 1 << 26, "test");
  std::remove(path.c_str());
  EXPECT_NE(bytes.find("\"registered_ops\""), std::string::npos);
  EXPECT_NE(bytes.find("kiln_test::mul_add(Tensor a, Tensor b, int k=2) -> Tensor"), std::string::npos);
  jit::LoadedFunction loaded = jit::load_bytes(bytes, "ok.kiln");
  for (int64_t b : {1, 5}) {
    Tensor x = randn({b, 4});
    expect_same(loaded(x), fn(x));
  }
  // Registered with another schema here (the default differs), or not at all.
  expect_error([&] { jit::load_bytes(replaced(bytes, "int k=2)", "int k=3)"), "other.kiln"); },
               {"jit::load: other.kiln", "kiln_test::mul_add", "int k=3) -> Tensor",
                "this program registered it as kiln_test::mul_add(Tensor a, Tensor b, int k=2) -> Tensor"});
  expect_error([&] { jit::load_bytes(replaced(bytes, "kiln_test::mul_add", "kiln_test::mul_sub"), "missing.kiln"); },
               {"jit::load: missing.kiln", "calls kiln_test::mul_sub", "has not registered",
                "register_op(\"kiln_test::mul_sub(Tensor a, Tensor b, int k=2) -> Tensor\")"});
  // The IR may not call an op the metadata does not list.
  expect_error([&] { jit::load_bytes(replaced(bytes, "\"registered_ops\"", "\"registered_opz\""), "unlisted.kiln"); },
               {"jit::load: unlisted.kiln", "the IR calls kiln_test::mul_add", "does not list"});
}

}  // namespace
}  // namespace kiln
