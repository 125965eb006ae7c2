// tests/unit/npy_test.cpp -- .npy files: round trips for every dtype NumPy knows, files written
// byte by byte (Fortran order, versions 2 and 3), and hostile files, which must give kiln::Error.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::expect_error;

namespace {

using Bytes = std::string;

std::string temp_path(const std::string& name) { return testing::TempDir() + "kiln_npy_" + name + ".npy"; }

void write_bytes(const std::string& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
}

Bytes read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

// A .npy file as the format document describes it: magic, version, little-endian header length
// (2 bytes in version 1, 4 after), the dict padded with spaces and a newline to 64 bytes.
Bytes make_npy(const std::string& dict, const Bytes& data, int major = 1) {
  size_t len_bytes = major == 1 ? 2 : 4;
  std::string h = dict;
  size_t unpadded = 8 + len_bytes + h.size() + 1;
  h.append((64 - unpadded % 64) % 64, ' ');
  h.push_back('\n');
  Bytes out = "\x93NUMPY";
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  for (size_t i = 0; i < len_bytes; ++i) out.push_back(static_cast<char>((h.size() >> (8 * i)) & 0xff));
  return out + h + data;
}

template <class T> Bytes raw(const std::vector<T>& v) {
  return Bytes(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

void expect_same(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.type(), want.type());
  EXPECT_EQ(got.to_vector<double>(), want.to_vector<double>());
}

}  // namespace

TEST(Npy, RoundTripsEveryDtypeWithANumpyDescr) {
  manual_seed(1);
  std::string path = temp_path("round_trip");
  for (DType t : {f32, f64, f16, i32, i64, u8, boolean}) {
    Tensor x = is_float(t)    ? randn({3, 4, 5}, t)
               : t == boolean ? bernoulli({3, 4, 5}, 0.5, boolean)
                              : randint(t == u8 ? 0 : -1000, 250, {3, 4, 5}, t);
    save_npy(x, path);
    expect_same(load_npy(path), x);
    save_npy(x.permute({2, 0, 1}).slice(1, 0, 3, 2), path);  // strided: saved in logical order
    expect_same(load_npy(path), x.permute({2, 0, 1}).slice(1, 0, 3, 2));
  }
  expect_error([&] { save_npy(zeros({2}, bf16), path); }, {"save_npy", "bf16[2]"});
}

TEST(Npy, WritesTheHeaderNumpyExpects) {
  std::string path = temp_path("header");
  save_npy(zeros({3, 4}), path);
  Bytes b = read_bytes(path);
  ASSERT_GE(b.size(), 10u);
  EXPECT_EQ(b.substr(0, 8), Bytes("\x93NUMPY\x01\x00", 8));
  size_t hlen = static_cast<unsigned char>(b[8]) | static_cast<unsigned char>(b[9]) << 8;
  EXPECT_EQ((10 + hlen) % 64, 0u);
  EXPECT_EQ(b.size(), 10 + hlen + 48);
  std::string h = b.substr(10, hlen);
  EXPECT_EQ(h.back(), '\n');
  EXPECT_EQ(h.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 0), 0u) << h;
  save_npy(zeros({7}, u8), path);
  EXPECT_NE(read_bytes(path).find("{'descr': '|u1', 'fortran_order': False, 'shape': (7,), }"), Bytes::npos);
  save_npy(scalar_tensor(true), path);
  EXPECT_NE(read_bytes(path).find("{'descr': '|b1', 'fortran_order': False, 'shape': (), }"), Bytes::npos);
}

TEST(Npy, RoundTripsZeroDimAndEmptyTensors) {
  std::string path = temp_path("edge");
  for (const Tensor& x : {scalar_tensor(2.5, f64), scalar_tensor(int64_t{-3}), zeros({0}), zeros({2, 0, 3}, i32)}) {
    save_npy(x, path);
    expect_same(load_npy(path), x);
  }
}

TEST(Npy, ReadsFortranOrderAndLaterVersions) {
  std::string path = temp_path("fortran");
  // A [2,3] array with a[i][j] = 10i + j, stored column by column.
  std::vector<float> cols = {0, 10, 1, 11, 2, 12};
  write_bytes(path, make_npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", raw(cols)));
  Tensor a = load_npy(path);
  EXPECT_EQ(a.type().str(), "f32[2,3]");
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{0, 1, 2, 10, 11, 12}));
  // [2,3,4] int64 with b[i][j][k] = 100i + 10j + k; Fortran order puts i fastest.
  std::vector<int64_t> f(24), want(24);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) {
        f[i + 2 * j + 6 * k] = 100 * i + 10 * j + k;
        want[(i * 3 + j) * 4 + k] = 100 * i + 10 * j + k;
      }
  write_bytes(path, make_npy("{'descr': '<i8', 'fortran_order': True, 'shape': (2, 3, 4), }", raw(f)));
  EXPECT_EQ(load_npy(path).to_vector<int64_t>(), want);
  // Versions 2 and 3 have a 4-byte header length; keys may come in any order.
  for (int major : {2, 3}) {
    write_bytes(path, make_npy("{'shape': (2,), 'fortran_order': False, 'descr': '<i4'}",
                               raw(std::vector<int32_t>{7, -8}), major));
    EXPECT_EQ(load_npy(path).to_vector<int32_t>(), (std::vector<int32_t>{7, -8}));
  }
  // NumPy bools are bytes; anything but 0 reads as true.
  write_bytes(path, make_npy("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", Bytes("\x00\x02\x01", 3)));
  EXPECT_EQ(load_npy(path).to_vector<bool>(), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(load_npy(path).to(u8).to_vector<uint8_t>(), (std::vector<uint8_t>{0, 1, 1}));
}

TEST(Npy, RejectsHostileFilesWithAnError) {
  std::string path = temp_path("hostile");
  const std::string f4 = "{'descr': '<f4', 'fortran_order': False, 'shape': ";
  Bytes data12 = raw(std::vector<float>(12, 1.0f));
  auto expect_rejected = [&](const Bytes& file, std::initializer_list<std::string> parts) {
    write_bytes(path, file);
    expect_error([&] { load_npy(path); }, parts);
  };
  Bytes good = make_npy(f4 + "(3, 4), }", data12);
  write_bytes(path, good);
  ASSERT_EQ(load_npy(path).shape(), (Dims{3, 4}));

  expect_rejected(good.substr(0, good.size() - 4), {"load_npy", path, "truncated"});
  expect_rejected("\x93NUMPX" + good.substr(6), {"load_npy", "magic"});
  expect_rejected(Bytes(), {"load_npy", "short"});
  expect_rejected(good.substr(0, 9), {"load_npy"});
  Bytes long_header = good;
  long_header[8] = '\xff';
  long_header[9] = '\xff';
  expect_rejected(long_header, {"load_npy", "header length"});
  Bytes v2 = make_npy(f4 + "(3, 4), }", data12, 2);
  v2[10] = v2[11] = '\xff';
  expect_rejected(v2, {"load_npy", "header length"});
  Bytes v4 = good;
  v4[6] = 4;
  expect_rejected(v4, {"load_npy", "version"});
  expect_rejected(make_npy(f4 + "(3, }", data12), {"load_npy", "shape"});
  expect_rejected(make_npy(f4 + "(3,", data12), {"load_npy", "shape"});
  expect_rejected(make_npy(f4 + "(-3,), }", data12), {"load_npy", "shape"});
  expect_rejected(make_npy(f4 + "(3.5,), }", data12), {"load_npy", "shape"});
  expect_rejected(make_npy(f4 + "(1000000000000, 1000000000000), }", data12), {"load_npy", "too large"});
  expect_rejected(make_npy(f4 + "(99999999999999999999999999,), }", data12), {"load_npy", "too large"});
  expect_rejected(make_npy(f4 + "(0, 1000000000000, 1000000000000), }", data12), {"load_npy", "too large"});
  expect_rejected(make_npy(f4 + "(4294967296, 4294967296, 16), }", data12), {"load_npy", "too large"});
  expect_rejected(make_npy(f4 + "(1000000, 1000000), }", data12), {"load_npy", "truncated"});
  std::string many = "(";
  for (int i = 0; i < 40; ++i) many += "1, ";
  expect_rejected(make_npy(f4 + many + "), }", data12), {"load_npy", "dimensions"});
  expect_rejected(make_npy("{'descr': '>f4', 'fortran_order': False, 'shape': (3, 4), }", data12),
                  {"load_npy", "big-endian"});
  expect_rejected(make_npy("{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", data12), {"load_npy", "c8"});
  expect_rejected(make_npy("{'descr': '<U4', 'fortran_order': False, 'shape': (3,), }", data12), {"load_npy", "U4"});
  expect_rejected(make_npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }", data12),
                  {"load_npy", "descr"});
  expect_rejected(make_npy("{'descr': '<f4', 'fortran_order': False, }", data12), {"load_npy", "shape"});
  expect_rejected(make_npy("{'descr': '<f4', 'shape': (3,), }", data12), {"load_npy", "fortran_order"});
  expect_rejected(make_npy("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (3,), }", data12),
                  {"load_npy", "fortran_order"});
  expect_rejected(make_npy("", data12), {"load_npy"});
  expect_error([] { load_npy(testing::TempDir() + "kiln_npy_does_not_exist.npy"); }, {"load_npy", "does_not_exist"});
  std::string dir = testing::TempDir() + "kiln_npy_dir";
  std::filesystem::create_directories(dir);
  expect_error([&] { load_npy(dir); }, {"load_npy"});
}

// Random corruptions of valid files: every one must load or throw kiln::Error, never crash.
TEST(Npy, SurvivesMutatedFiles) {
  std::vector<Bytes> seeds;
  seeds.push_back(
      make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", raw(std::vector<float>(12, 0.5f))));
  seeds.push_back(
      make_npy("{'descr': '<i8', 'fortran_order': True, 'shape': (2, 3, 2), }", raw(std::vector<int64_t>(12, -1))));
  seeds.push_back(make_npy("{'descr': '|b1', 'fortran_order': False, 'shape': (5,), }", Bytes(5, '\x01'), 2));
  seeds.push_back(make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (), }", raw(std::vector<double>{1.0})));
  const std::string tokens = "(),:'\" 0123456789{}<>|=TrueFalse-fibu\x93\xff";
  std::mt19937 rng(2024);
  auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  int loaded = 0, rejected = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    // A fresh file each time: rewriting one in place makes ext4 flush it to disk on every close.
    std::string path = temp_path("fuzz" + std::to_string(iter));
    Bytes b = seeds[pick(seeds.size())];
    int edits = 1 + static_cast<int>(pick(4));
    for (int e = 0; e < edits && !b.empty(); ++e) {
      size_t header_end = std::min(b.size(), b.find('\n') + 1);  // npos + 1 == 0: the whole file
      if (header_end == 0) header_end = b.size();
      switch (pick(5)) {
        case 0:  // any byte, any value
          b[pick(b.size())] = static_cast<char>(pick(256));
          break;
        case 1:  // a header byte, to a character the header grammar uses
          b[pick(header_end)] = tokens[pick(tokens.size())];
          break;
        case 2:  // truncate
          b.resize(pick(b.size() + 1));
          break;
        case 3:  // insert
          b.insert(pick(b.size() + 1), 1, tokens[pick(tokens.size())]);
          break;
        case 4:  // delete
          b.erase(pick(b.size()), 1 + pick(3));
          break;
      }
    }
    write_bytes(path, b);
    try {
      Tensor t = load_npy(path);
      EXPECT_LE(t.numel() * dtype_size(t.dtype()), static_cast<int64_t>(b.size()));
      ++loaded;
    } catch (const Error&) {
      ++rejected;
    }
    std::filesystem::remove(path);
  }
  EXPECT_GT(loaded, 0);
  EXPECT_GT(rejected, 0);
}

namespace kiln {
namespace {

TEST(Npy, ReadsFromMemoryAsFromAFile) {
  Bytes file = make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", raw(std::vector<float>{1.5f, -2}));
  Tensor t = npy_from_bytes(file, "mem");
  test::expect_close(t, {1.5, -2}, 0);
  test::expect_error([] { npy_from_bytes("\x93NUMPY", "mem"); }, {"load_npy", "mem", "too short"});
}

// save_npy replaces the file whole, and a symlink planted at the path is replaced, not followed.
TEST(Npy, SaveReplacesTheFileAtomically) {
  std::string path = temp_path("atomic"), target = temp_path("atomic-target");
  std::remove(path.c_str());
  { std::ofstream(target) << "not yours"; }
  std::filesystem::create_symlink(target, path);
  save_npy(from_vector<float>({1, 2}), path);
  EXPECT_FALSE(std::filesystem::is_symlink(path));
  test::expect_close(load_npy(path), {1, 2}, 0);
  std::ifstream in(target);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "not yours");
  std::remove(path.c_str());
  std::remove(target.c_str());
}

}  // namespace
}  // namespace kiln
