// tests/ops/inplace_test.cpp -- eager in-place ops write into their tensor directly: the same
// bits as the out-of-place op then a copy, over dtypes, broadcasting and strided tensors; no
// temporary of the tensor's size; operands that share memory with the written tensor are read
// before it is written; writes into expanded tensors throw.
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tests/ops/reference.h"
#include "tests/unit/test_util.h"

namespace kiln::test {
namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  if (!(a.type() == b.type())) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  size_t n = static_cast<size_t>(a.numel() * dtype_size(a.dtype()));
  return n == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), n) == 0;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// An in-place method and the out-of-place expression it must match.
struct Method {
  std::string name;
  std::function<void(Tensor&, const Tensor&)> in_place;
  std::function<Tensor(const Tensor&, const Tensor&)> out_of_place;
};

using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);

std::vector<Method> tensor_methods() {
  auto method = [](std::string name, void (*in_place)(Tensor&, const Tensor&), BinaryFn out) {
    return Method{std::move(name), in_place, out};
  };
  return {
      method(
          "add_", [](Tensor& s, const Tensor& o) { s.add_(o); },
          [](const Tensor& s, const Tensor& o) { return s + o; }),
      method(
          "sub_", [](Tensor& s, const Tensor& o) { s.sub_(o); },
          [](const Tensor& s, const Tensor& o) { return s - o; }),
      method(
          "mul_", [](Tensor& s, const Tensor& o) { s.mul_(o); },
          [](const Tensor& s, const Tensor& o) { return s * o; }),
      method(
          "div_", [](Tensor& s, const Tensor& o) { s.div_(o); },
          [](const Tensor& s, const Tensor& o) { return s / o; }),
      method(
          "copy_", [](Tensor& s, const Tensor& o) { s.copy_(o); }, [](const Tensor&, const Tensor& o) { return o; }),
  };
}

// With a number v as the operand (the tensor argument is unused).
std::vector<Method> scalar_methods(Scalar v) {
  using Fn = std::function<Tensor(const Tensor&)>;
  auto method = [](std::string name, std::function<void(Tensor&)> in_place, Fn out) {
    return Method{std::move(name), [in_place](Tensor& s, const Tensor&) { in_place(s); },
                  [out](const Tensor& s, const Tensor&) { return out(s); }};
  };
  std::optional<Scalar> none;
  return {
      method(
          "add_", [v](Tensor& s) { s.add_(v); }, [v](const Tensor& s) { return s + v; }),
      method(
          "sub_", [v](Tensor& s) { s.sub_(v); }, [v](const Tensor& s) { return s - v; }),
      method(
          "mul_", [v](Tensor& s) { s.mul_(v); }, [v](const Tensor& s) { return s * v; }),
      method(
          "div_", [v](Tensor& s) { s.div_(v); }, [v](const Tensor& s) { return s / v; }),
      method(
          "fill_", [v](Tensor& s) { s.fill_(v); }, [v](const Tensor& s) { return full({}, v, s.dtype()); }),
      method(
          "clamp_", [=](Tensor& s) { s.clamp_(v, none); }, [=](const Tensor& s) { return clamp(s, v, none); }),
      method(
          "clamp_", [=](Tensor& s) { s.clamp_(none, v); }, [=](const Tensor& s) { return clamp(s, none, v); }),
      method(
          "clamp_", [v](Tensor& s) { s.clamp_(v, 3); }, [v](const Tensor& s) { return clamp(s, v, 3); }),
  };
}

// Values every dtype holds (whole numbers for integers, 1..5 so division never sees 0).
Tensor nonzero_values(const Dims& shape, DType t) {
  if (t == boolean) return uniform(shape, t, 0, 1);
  return is_float(t) ? uniform(shape, t, 0.5, 5.0) : uniform(shape, t, 1, 5);
}

// Self layouts: contiguous, transposed, strided slices, and a broadcast-free column.
std::vector<Tensor> selves(DType t) {
  return {nonzero_values({3, 5}, t),
          nonzero_values({5, 3}, t).t(),
          nonzero_values({3, 10}, t).slice(1, 0, 10, 2),
          nonzero_values({6, 5}, t).slice(0, 1, 6, 2),
          nonzero_values({3, 5, 2}, t).select(2, 1),
          nonzero_values({}, t)};
}

// Runs m on a clone of `self` in place and out of place from the same values: the in-place
// result must be the out-of-place one converted to self's dtype, bit for bit; where the
// out-of-place op throws, the in-place one throws the same message and writes nothing.
void check(const Method& m, const Tensor& self, const Tensor& other) {
  SCOPED_TRACE(m.name + " into " + self.type().str() + " strides " + shape_str(self.strides()) + " from " +
               (other.defined() ? other.type().str() : "a number"));
  Tensor base = self.clone();
  std::string want_error;
  Tensor want;
  try {
    Tensor r = m.out_of_place(self, other);
    bool fits = error_of([&] { broadcast_shapes(r.shape(), self.shape()); }).empty() &&
                broadcast_shapes(r.shape(), self.shape()) == self.shape();
    bool castable =
        !(is_float(r.dtype()) && !is_float(self.dtype())) && !(r.dtype() != boolean && self.dtype() == boolean);
    if (fits && castable) want = r.to(self.dtype()).expand(self.shape()).contiguous();
  } catch (const Error& e) {
    want_error = e.what();
  }
  Tensor target = self;  // self is a view of its own buffer; write into it
  std::string got_error = error_of([&] { m.in_place(target, other); });
  if (!want_error.empty()) {
    EXPECT_EQ(got_error, want_error);
  } else if (!want.defined()) {
    // The result does not broadcast to self's shape, or is of a dtype self cannot hold.
    EXPECT_EQ(got_error.rfind(m.name + ": ", 0), 0u) << got_error;
    EXPECT_NE(got_error.find(self.shape().empty() ? "[]" : shape_str(self.shape())), std::string::npos) << got_error;
  } else {
    EXPECT_EQ(got_error, "");
    EXPECT_TRUE(same_bits(target, want)) << "got\n" << target << "\nwant\n" << want;
    return;
  }
  EXPECT_TRUE(same_bits(target, base)) << "an in-place op that threw wrote into its tensor";
}

TEST(InPlaceKernel, TensorOperandsMatchOutOfPlaceBitwise) {
  manual_seed(1);
  const std::vector<Dims> other_shapes = {{3, 5}, {5}, {3, 1}, {}, {1, 5}, {2, 3, 5}, {4}};
  for (DType st : kAllDTypes)
    for (DType ot : kAllDTypes)
      for (const Method& m : tensor_methods())
        for (const Tensor& self : selves(st))
          for (const Dims& os : other_shapes) {
            if (self.dim() == 0 && os.size() > 1) continue;  // covered by the 2-d selves
            check(m, self, nonzero_values(os, ot));
          }
}

TEST(InPlaceKernel, NonContiguousOperandsMatchOutOfPlaceBitwise) {
  manual_seed(2);
  for (DType st : {f32, f64, f16, bf16, i64})
    for (DType ot : {f32, f64, f16, i32, boolean})
      for (const Method& m : tensor_methods())
        for (const Tensor& self : selves(st)) {
          if (self.dim() != 2) continue;
          check(m, self, nonzero_values({5, 3}, ot).t());                  // transposed
          check(m, self, nonzero_values({3, 10}, ot).slice(1, 1, 10, 2));  // strided
          check(m, self, nonzero_values({1, 5}, ot).expand({3, 5}));       // expanded (stride 0)
        }
}

TEST(InPlaceKernel, NumberOperandsMatchOutOfPlaceBitwise) {
  manual_seed(3);
  for (Scalar v : {Scalar(2), Scalar(-3), Scalar(0.75), Scalar(true), Scalar(300)})
    for (DType st : kAllDTypes)
      for (const Method& m : scalar_methods(v))
        for (const Tensor& self : selves(st)) check(m, self, Tensor());
}

TEST(InPlaceKernel, HalfSelfWithAnIntegerOperandRoundsLikeTheOutOfPlaceOp) {
  // f16 + i64 computes in f16: the operand is rounded to f16 (2049 -> 2048) before the add,
  // as the out-of-place op does, not added in f32 and rounded once.
  for (DType half : {f16, bf16}) {
    Tensor self = full({4}, 0.5, half);
    Tensor other = from_vector<int64_t>({2049, 4097, 3, 65519});
    check(tensor_methods()[0], self, other);
    check(tensor_methods()[2], self, other);
  }
}

TEST(InPlaceKernel, LargeTensorsSplitAcrossThreadsMatchOutOfPlaceBitwise) {
  manual_seed(4);
  for (DType st : {f32, f64, f16}) {
    Tensor self = nonzero_values({300, 700}, st);
    check(tensor_methods()[3], self, nonzero_values({700}, f32));
    check(tensor_methods()[0], self.t(), nonzero_values({300}, f64));
    check(scalar_methods(Scalar(0.3))[5], self.slice(1, 0, 700, 3), Tensor());
  }
}

TEST(InPlaceKernel, AllocatesNoTemporaryForSameDtypeOperands) {
  Tensor p = rand({1 << 20}), q = rand({1 << 20}), r = rand({1 << 20}, f64), s = rand({1024});
  Allocator& a = cpu_allocator();
  int64_t before = a.stats().allocations;
  p.add_(q);
  q.add_(1);
  p.sub_(q).mul_(q).div_(q);
  p.add_(0.5).mul_(2).clamp_(-1, 1).clamp_(0.0, std::nullopt);
  p.copy_(q);
  p.copy_(r);                       // converting copies convert row by row
  p.add_(r);                        // mixed dtypes: the kernel converts chunks in its own buffers
  p.reshape({1024, 1024}).mul_(s);  // broadcast
  p.add_(p);                        // the tensor itself, same layout: read and written element by element
  EXPECT_EQ(a.stats().allocations, before);
  Tensor want = (q + r).to(f32);
  p.copy_(q).add_(r);
  EXPECT_TRUE(same_bits(p, want));
}

TEST(InPlaceKernel, CopyFromAnOverlappingShiftedViewReadsBeforeWriting) {
  for (int64_t n : {8, 100003}) {
    SCOPED_TRACE(n);
    Tensor a = arange(n).to(f64);
    a.slice(0, 1, n).copy_(a.slice(0, 0, n - 1));  // a[1:] = a[:-1], as NumPy
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = static_cast<double>(i == 0 ? 0 : i - 1);
    expect_close(a, want, 0);
    Tensor b = arange(n).to(f32);
    b.slice(0, 0, n - 1).copy_(b.slice(0, 1, n));  // a[:-1] = a[1:]
    for (int64_t i = 0; i < n; ++i) want[i] = static_cast<double>(i == n - 1 ? i : i + 1);
    expect_close(b, want, 0);
    // A strided column: copied element by element, not by memcpy (which may move forward).
    Tensor c = arange(2 * n).to(f64).reshape({n, 2});
    c.select(1, 0).slice(0, 1, n).copy_(c.select(1, 0).slice(0, 0, n - 1));
    for (int64_t i = 0; i < n; ++i) want[i] = static_cast<double>(i == 0 ? 0 : 2 * (i - 1));
    expect_close(c.select(1, 0), want, 0);
  }
}

TEST(InPlaceKernel, ArithmeticWithAnOverlappingShiftedViewReadsBeforeWriting) {
  for (int64_t n : {9, 100003}) {
    SCOPED_TRACE(n);
    Tensor a = arange(n).to(f64) * 0.5;
    Tensor want = a.clone();
    want.slice(0, 1, n).copy_(a.slice(0, 1, n) + a.slice(0, 0, n - 1));
    a.slice(0, 1, n).add_(a.slice(0, 0, n - 1));
    EXPECT_TRUE(same_bits(a, want));
    Tensor b = arange(n).to(f32) + 1.0f;
    Tensor want_b = b.clone();
    want_b.slice(0, 0, n - 1).copy_(b.slice(0, 0, n - 1) * b.slice(0, 1, n));
    b.slice(0, 0, n - 1).mul_(b.slice(0, 1, n));
    EXPECT_TRUE(same_bits(b, want_b));
  }
}

TEST(InPlaceKernel, AddingATransposedSelfViewUsesTheOldValues) {
  manual_seed(5);
  for (int64_t n : {4, 300}) {
    SCOPED_TRACE(n);
    Tensor a = randn({n, n});
    Tensor want = a + a.t();
    a.add_(a.t());
    EXPECT_TRUE(same_bits(a, want));
    Tensor c = randn({n, n}, f64);
    Tensor want_c = c.clone();
    want_c.copy_(c.t().contiguous());
    c.copy_(c.t());  // c = c.T
    EXPECT_TRUE(same_bits(c, want_c));
  }
}

TEST(InPlaceKernel, BroadcastingARowOfItselfUsesTheOldRow) {
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  a.mul_(a[0]);  // row 0 is written first; the other rows still scale by its old values
  expect_close(a, {1, 4, 3, 8, 5, 12}, 0);
  Tensor b = from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2});
  b.slice(0, 1, 3).sub_(b.slice(0, 0, 2));  // rows 1..2 minus rows 0..1 (overlapping)
  expect_close(b, {1, 2, 2, 2, 2, 2}, 0);
  Tensor c = from_vector<double>({1, 2, 3, 4}, {2, 2});
  c.clamp_(std::nullopt, 2.5).add_(c.select(1, 0).unsqueeze(1));  // column 0 broadcast
  expect_close(c, {2, 3, 5, 5}, 0);
}

TEST(InPlaceKernel, TheSameViewIsReadInPlace) {
  Tensor a = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor t = a.t();
  t.mul_(t);  // one layout, elementwise: no copy needed, and the result is a^2
  expect_close(a, {1, 4, 9, 16, 25, 36}, 0);
  a.copy_(a);
  a.slice(1, 0, 3, 2).sub_(a.slice(1, 0, 3, 2));
  expect_close(a, {0, 4, 0, 0, 25, 0}, 0);
}

TEST(InPlaceKernel, WritingIntoAnExpandedTensorThrows) {
  Tensor base = zeros({3});
  Tensor e = base.expand({4, 3});
  const std::vector<std::string> parts = {"unsupported operation", "more than one element", "f32[4,3]",
                                          "single memory location"};
  auto expect_throws = [&](const char* op, const std::function<void()>& fn) {
    SCOPED_TRACE(op);
    std::string msg = error_of(fn);
    EXPECT_EQ(msg.rfind(op, 0), 0u) << msg;
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg;
  };
  expect_throws("add_:", [&] { e.add_(1); });
  expect_throws("sub_:", [&] { e.sub_(ones({4, 3})); });
  expect_throws("mul_:", [&] { e.mul_(2.0); });
  expect_throws("div_:", [&] { e.div_(ones({3})); });
  expect_throws("clamp_:", [&] { e.clamp_(0, 1); });
  expect_throws("fill_:", [&] { e.fill_(1); });
  expect_throws("fill_:", [&] { e.zero_(); });
  expect_throws("copy_:", [&] { e.copy_(ones({4, 3})); });
  expect_close(base, {0, 0, 0}, 0);
  // With history (the autograd path) too.
  Tensor x = ones({3}).requires_grad_();
  Tensor y = x * 2.0;
  expect_throws("add_:", [&] { y.expand({4, 3}).add_(1); });
  // A size-1 dim of stride 0 is one element: writing it is fine.
  Tensor one = zeros({1}).expand({1, 1});
  one.add_(2);
  expect_close(one, {2}, 0);
  zeros({3}).expand({0, 3}).add_(1);  // no elements at all
}

}  // namespace
}  // namespace kiln::test
