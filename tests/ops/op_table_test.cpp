// tests/ops/op_table_test.cpp -- every op in ops.def has a complete definition.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

#include "runtime/op.h"
#include "runtime/simd/kernels.h"

namespace kiln {
namespace {

struct OpEntry {
  OpId id;
  const char* name;
  int arity;
  OpFamily family;
};
void PrintTo(const OpEntry& e, std::ostream* os) { *os << e.name; }  // not its bytes

// The list, straight from ops.def: an op added there is tested here at once.
const OpEntry kAllOps[] = {
#define OP(Name, name, arity, family) {OpId::Name, #name, arity, OpFamily::family},
#include "runtime/ops.def"
#undef OP
};

class OpTable : public ::testing::TestWithParam<OpEntry> {};

TEST_P(OpTable, HasNameArityAndFamilyFromOpsDef) {
  const OpEntry& e = GetParam();
  ASSERT_NE(op_name(e.id), nullptr);
  EXPECT_STRNE(op_name(e.id), "");
  EXPECT_STREQ(op_name(e.id), e.name);
  EXPECT_EQ(op_arity(e.id), e.arity);
  EXPECT_TRUE(e.arity == -1 || (e.arity >= 0 && e.arity <= 3)) << e.arity;  // iota takes none
  EXPECT_EQ(op_family(e.id), e.family);
}

TEST_P(OpTable, HasShapeRuleAndExactlyOneImplementation) {
  const OpEntry& e = GetParam();
  const OpDef& def = op_def(e.id);
  EXPECT_NE(def.infer, nullptr) << e.name << " has no shape/dtype rule";
  int implementations = (def.cpu != nullptr) + (def.view != nullptr) + (def.make != nullptr);
  EXPECT_EQ(implementations, 1) << e.name << " must set exactly one of .cpu, .view and .make";
  // Views alias their input; a registered op's kernels (.make) return its result; every other
  // op writes a fresh output.
  if (e.id == OpId::Registered) {
    EXPECT_NE(def.make, nullptr);
  } else if (e.family == OpFamily::View) {
    EXPECT_NE(def.view, nullptr) << e.name;
  } else {
    EXPECT_NE(def.cpu, nullptr) << e.name;
  }
}

TEST_P(OpTable, NameIsUnique) {
  const OpEntry& e = GetParam();
  int same = 0;
  for (const OpEntry& o : kAllOps) same += std::string(op_name(o.id)) == op_name(e.id);
  EXPECT_EQ(same, 1) << "op name \"" << op_name(e.id) << "\" is used " << same << " times";
}

TEST_P(OpTable, PointwiseOpHasKindsAndAKernelForEachKind) {
  const OpEntry& e = GetParam();
  const OpDef& def = op_def(e.id);
  if (e.family != OpFamily::Pointwise) {
    EXPECT_EQ(def.kinds, kAllKinds) << e.name << ": kinds is for pointwise ops only";
    return;
  }
  EXPECT_NE(def.kinds, 0) << e.name << " accepts no dtype kind";
  EXPECT_EQ(def.kinds & ~kAllKinds, 0) << e.name;
  EXPECT_GE(e.arity, 1);
  const simd::KernelTable& table = simd::kernels();
  for (int t = 0; t < kNumDTypes; ++t) {
    DType d = static_cast<DType>(t);
    if (d == DType::F16 || d == DType::BF16) continue;  // these compute in f32
    bool wanted = def.kinds & kind_bit(d);
    EXPECT_EQ(table.pointwise[int(e.id)][t] != nullptr, wanted)
        << e.name << " kernel for " << dtype_name(d) << " (isa " << table.isa << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpTable, ::testing::ValuesIn(kAllOps),
                         [](const ::testing::TestParamInfo<OpEntry>& info) { return std::string(info.param.name); });

TEST(OpTableList, IdsAreDenseAndInOrder) {
  int i = 0;
  for (const OpEntry& e : kAllOps) EXPECT_EQ(static_cast<int>(e.id), i++) << e.name;
  EXPECT_EQ(i, kNumOps);
  std::set<std::string> names;
  for (const OpEntry& e : kAllOps) names.insert(op_name(e.id));
  EXPECT_EQ(static_cast<int>(names.size()), kNumOps);
}

// KILN_ISA (set by the ctest entries that rerun this suite) really selects the kernels.
TEST(KernelTable, HonoursKilnIsa) {
  const char* env = std::getenv("KILN_ISA");
  std::string isa = simd::kernels().isa;
  if (env && std::string(env) == "scalar") {
    EXPECT_EQ(isa, "scalar");
  }
#if defined(__x86_64__)
  if (env && std::string(env) == "avx2" && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    EXPECT_EQ(isa, "avx2");
  }
#endif
  EXPECT_TRUE(isa == "scalar" || isa == "avx2" || isa == "avx512") << isa;
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A pointwise op's numbers take operand slots; tensors fill the rest in order (runtime/op.h).
TEST(OperandSlots, NumbersAndTensorsShareTheSlots) {
  for (int k = 0; k < 3; ++k) EXPECT_EQ(input_of_slot(0, k), k);  // no numbers: slot k is input k
  EXPECT_EQ(input_of_slot(0b010, 0), 0);                          // where(c, 2.0, y)
  EXPECT_EQ(input_of_slot(0b010, 1), -1);
  EXPECT_EQ(input_of_slot(0b010, 2), 1);
  EXPECT_EQ(input_of_slot(0b101, 1), 0);  // clamp(2.0, x, 5.0)
  for (uint8_t mask : {0b000, 0b001, 0b010, 0b100, 0b011, 0b101, 0b110})
    for (int k = 0; k < 3; ++k) {
      int t = input_of_slot(mask, k);
      if (t >= 0) {
        EXPECT_EQ(slot_of_input(mask, t), k) << int(mask) << " slot " << k;
      }
    }
}

}  // namespace
}  // namespace kiln
