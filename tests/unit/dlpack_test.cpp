// tests/unit/dlpack_test.cpp -- to_dlpack / from_dlpack: zero copy both ways, every dtype DLPack
// 0.6 expresses, strides and offsets, the deleter run exactly once, and clear errors for
// what cannot cross.
#include <dlpack/dlpack.h>
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cstring>
#include <vector>

namespace kiln {
namespace {

// A capsule a "foreign library" made over its own buffer, counting its deleter's runs.
struct Foreign {
  std::vector<float> buffer;
  std::vector<int64_t> shape, strides;
  int deleted = 0;
  DLManagedTensor m{};

  Foreign(std::vector<int64_t> shape_, std::vector<int64_t> strides_, size_t n)
      : buffer(n), shape(std::move(shape_)), strides(std::move(strides_)) {
    for (size_t i = 0; i < n; ++i) buffer[i] = static_cast<float>(i);
    DLTensor& d = m.dl_tensor;
    d.data = buffer.data();
    d.device = {kDLCPU, 0};
    d.ndim = static_cast<int>(shape.size());
    d.dtype = {kDLFloat, 32, 1};
    d.shape = shape.data();
    d.strides = strides.empty() ? nullptr : strides.data();
    d.byte_offset = 0;
    m.manager_ctx = this;
    m.deleter = [](DLManagedTensor* self) { ++static_cast<Foreign*>(self->manager_ctx)->deleted; };
  }
};

std::string error_of(DLManagedTensor* m) {
  try {
    from_dlpack(m);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(DLPack, ExportsEveryDTypeWithoutACopy) {
  struct Case {
    DType dtype;
    uint8_t code, bits;
  } cases[] = {{f32, kDLFloat, 32}, {f64, kDLFloat, 64}, {f16, kDLFloat, 16}, {bf16, kDLBfloat, 16},
               {i32, kDLInt, 32},   {i64, kDLInt, 64},   {u8, kDLUInt, 8}};
  for (const Case& c : cases) {
    Tensor t = arange(0, 6).reshape({2, 3}).to(c.dtype);
    DLManagedTensor* m = to_dlpack(t);
    const DLTensor& d = m->dl_tensor;
    EXPECT_EQ(d.data, t.data_ptr()) << dtype_name(c.dtype);
    EXPECT_EQ(d.device.device_type, kDLCPU);
    EXPECT_EQ(d.dtype.code, c.code);
    EXPECT_EQ(d.dtype.bits, c.bits);
    EXPECT_EQ(d.dtype.lanes, 1);
    ASSERT_EQ(d.ndim, 2);
    EXPECT_EQ(d.shape[0], 2);
    EXPECT_EQ(d.shape[1], 3);
    EXPECT_EQ(d.strides[0], 3);
    EXPECT_EQ(d.strides[1], 1);
    EXPECT_EQ(d.byte_offset, 0u);
    // Back into kiln: the same memory, the same values.
    Tensor back = from_dlpack(m);
    EXPECT_EQ(back.data_ptr(), t.data_ptr());
    EXPECT_EQ(back.dtype(), c.dtype);
    EXPECT_EQ(back.to_vector<double>(), t.to_vector<double>());
  }
}

TEST(DLPack, ExportsViewsWithTheirStridesAndOffset) {
  Tensor base = arange(0, 24).reshape({2, 3, 4}).to(f32);
  Tensor v = base.permute({2, 0, 1}).slice(0, 1, 4, 2);  // [2,2,3], strides [2,12,4], offset 1
  DLManagedTensor* m = to_dlpack(v);
  const DLTensor& d = m->dl_tensor;
  ASSERT_EQ(d.ndim, 3);
  const auto* p = static_cast<const float*>(d.data);
  std::vector<float> read;
  for (int64_t i = 0; i < d.shape[0]; ++i)
    for (int64_t j = 0; j < d.shape[1]; ++j)
      for (int64_t k = 0; k < d.shape[2]; ++k)
        read.push_back(p[i * d.strides[0] + j * d.strides[1] + k * d.strides[2]]);
  EXPECT_EQ(read, v.to_vector<float>());
  Tensor back = from_dlpack(m);
  EXPECT_EQ(back.strides(), v.strides());
  EXPECT_EQ(back.to_vector<float>(), v.to_vector<float>());
  // Writes through either side are seen by the other.
  back.fill_(-1.0);
  EXPECT_EQ(base.permute({2, 0, 1}).slice(0, 1, 4, 2).sum().item<float>(), -12.0f);
}

TEST(DLPack, TheCapsuleKeepsTheMemoryAliveUntilItsDeleter) {
  DLManagedTensor* m = nullptr;
  {
    Tensor t = full({1000}, 3.0);
    m = to_dlpack(t);
  }  // the tensor is gone; the capsule still holds its storage
  const auto* p = static_cast<const float*>(m->dl_tensor.data);
  EXPECT_EQ(p[999], 3.0f);
  m->deleter(m);  // the consumer is done: the storage goes back (ASan checks no leak)
}

TEST(DLPack, ImportsWithoutACopyAndDeletesOnce) {
  Foreign f({3, 4}, {}, 12);  // null strides: row-major
  {
    Tensor t = from_dlpack(&f.m);
    EXPECT_EQ(t.data_ptr(), f.buffer.data());
    EXPECT_EQ(t.shape(), Dims({3, 4}));
    EXPECT_EQ(t.strides(), Dims({4, 1}));
    Tensor view = t.t();  // a view outlives the tensor it came from
    t = Tensor();
    EXPECT_EQ(f.deleted, 0);
    view.mul_(2.0);
    EXPECT_EQ(f.buffer[5], 10.0f);  // written through kiln, seen by the producer
    EXPECT_EQ(f.deleted, 0);
  }
  EXPECT_EQ(f.deleted, 1);
}

TEST(DLPack, ImportsStridesAndByteOffset) {
  Foreign f({2, 3}, {1, 4}, 16);  // a column-major-ish view with a gap
  f.m.dl_tensor.byte_offset = 2 * sizeof(float);
  {
    Tensor t = from_dlpack(&f.m);
    EXPECT_EQ(t.to_vector<float>(), std::vector<float>({2, 6, 10, 3, 7, 11}));
  }
  EXPECT_EQ(f.deleted, 1);
  Foreign empty({0, 5}, {}, 0);
  empty.m.dl_tensor.data = nullptr;
  {
    Tensor t = from_dlpack(&empty.m);
    EXPECT_EQ(t.numel(), 0);
  }
  EXPECT_EQ(empty.deleted, 1);
  Foreign scalar({}, {}, 1);
  {
    Tensor t = from_dlpack(&scalar.m);
    EXPECT_EQ(t.dim(), 0);
    EXPECT_EQ(t.item<float>(), 0.0f);
  }
  EXPECT_EQ(scalar.deleted, 1);
}

TEST(DLPack, RejectsWhatItCannotExpress) {
  Tensor flags = gt(full({2}, 1.0), full({2}, 0.5));
  EXPECT_THROW(
      {
        try {
          to_dlpack(flags);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("bool[2] cannot be expressed in DLPack 0.6"), std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
  Tensor w = ones({2}).requires_grad_();
  try {
    to_dlpack(w);
    ADD_FAILURE() << "a tensor that requires grad was exported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("requires grad"), std::string::npos) << e.what();
  }
  DLManagedTensor* m = to_dlpack(w.detach());
  EXPECT_EQ(m->dl_tensor.data, w.data_ptr());
  m->deleter(m);
}

// Each malformed capsule gets a clear error, and the producer's deleter still runs once.
TEST(DLPack, ImportChecksEveryField) {
  auto expect_error = [](auto mutate, const std::string& want) {
    Foreign f({2, 3}, {3, 1}, 6);
    mutate(f);
    std::string got = error_of(&f.m);
    EXPECT_NE(got.find(want), std::string::npos) << got;
    EXPECT_EQ(f.deleted, 1) << want;
  };
  expect_error([](Foreign& f) { f.m.dl_tensor.device = {kDLCUDA, 1}; }, "lives on cuda:1");
  expect_error([](Foreign& f) { f.m.dl_tensor.device = {kDLOpenCL, 0}; }, "device type 4");
  expect_error([](Foreign& f) { f.m.dl_tensor.dtype = {kDLFloat, 32, 4}; }, "with 4 lanes");
  expect_error([](Foreign& f) { f.m.dl_tensor.dtype = {kDLComplex, 64, 1}; }, "dtype complex64 has no kiln dtype");
  expect_error([](Foreign& f) { f.m.dl_tensor.dtype = {kDLInt, 8, 1}; }, "dtype int8 has no kiln dtype");
  expect_error([](Foreign& f) { f.m.dl_tensor.ndim = -1; }, "rank -1");
  expect_error([](Foreign& f) { f.m.dl_tensor.ndim = 1000; }, "rank 1000");
  expect_error([](Foreign& f) { f.m.dl_tensor.shape = nullptr; }, "null shape");
  expect_error([](Foreign& f) { f.shape[1] = -3; }, "size -3 of dim 1 is negative");
  expect_error([](Foreign& f) { f.strides[0] = -3; }, "stride -3 of dim 0 is negative");
  expect_error([](Foreign& f) { f.shape[0] = INT64_MAX / 2; }, "span more memory than there is");
  expect_error([](Foreign& f) { f.strides[0] = INT64_MAX / 4; }, "span more memory than there is");
  expect_error([](Foreign& f) { f.m.dl_tensor.data = nullptr; }, "data is null for 6 elements");
  expect_error([](Foreign& f) { f.m.dl_tensor.byte_offset = 2; }, "not aligned to its 4-byte elements");
  EXPECT_NE(error_of(nullptr).find("null"), std::string::npos);
}

}  // namespace
}  // namespace kiln
