// tests/nn/safetensors_test.cpp -- safetensors: round trips of every dtype, the on-disk layout,
// and hostile files (each must throw kiln::Error, never crash), plus a byte-mutation fuzz loop.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;
using nlohmann::json;

namespace {

// In memory when possible: the fuzz loop rewrites one file thousands of times, and on ext4
// every truncate-and-rewrite starts a disk flush.
std::string temp_path(const std::string& name) {
  std::string dir = std::filesystem::is_directory("/dev/shm") ? "/dev/shm/" : ::testing::TempDir();
  return dir + "kiln_safetensors_test_" + name;
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string u64le(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(n >> (8 * i));
  return s;
}

// A file made by hand, as another library would write it.
std::string file_of(const std::string& header, const std::string& data) { return u64le(header.size()) + header + data; }

std::string f32_bytes(std::initializer_list<float> v) {
  std::string s;
  for (float x : v) s.append(reinterpret_cast<const char*>(&x), 4);
  return s;
}

class Safetensors : public ::testing::Test {
 protected:
  void TearDown() override { std::remove(path_.c_str()); }
  // Writes `bytes` and expects load_safetensors to throw kiln::Error mentioning `parts`.
  void expect_rejected(const std::string& bytes, std::initializer_list<std::string> parts) {
    write_bytes(path_, bytes);
    expect_error([&] { load_safetensors(path_); }, parts);
  }
  std::string path_ = temp_path(::testing::UnitTest::GetInstance()->current_test_info()->name());
};

}  // namespace

TEST_F(Safetensors, RoundTripsEveryDtype) {
  std::map<std::string, Tensor> in;
  in["f64"] = from_vector<double>({1.5, -2.25, 1e300, -0.0}, {2, 2});
  in["f32"] = from_vector<float>({3.5f, -1e-30f, 7, 8, 9, 10}, {3, 2});
  in["f16"] = from_vector<float>({0.5f, -2, 65504, 0.099975586f}).to(f16);
  in["bf16"] = from_vector<float>({1, -3.0e38f, 0.0078125f}).to(bf16);
  in["i64"] = from_vector<int64_t>({INT64_MIN, -1, INT64_MAX});
  in["i32"] = from_vector<int32_t>({INT32_MIN, 0, 12345}, {1, 3});
  in["u8"] = from_vector<uint8_t>({0, 128, 255});
  in["bool"] = from_vector<bool>({true, false, false, true}, {2, 1, 2});
  in["scalar"] = scalar_tensor(4.25, f32);
  in["empty"] = zeros({0, 3}, i32);
  in["strided"] = arange(0, 6).to(f64).reshape({2, 3}).t();  // saved contiguous
  std::string path = path_;
  save_safetensors(in, path);
  std::map<std::string, Tensor> out = load_safetensors(path);
  ASSERT_EQ(out.size(), in.size());
  for (auto& [name, t] : in) {
    const Tensor& u = out.at(name);
    EXPECT_EQ(u.type(), t.type()) << name;
    EXPECT_TRUE(u.is_contiguous()) << name;
    EXPECT_EQ(u.to_vector<double>(), t.to_vector<double>()) << name;
  }
  EXPECT_EQ(out.at("i64").to_vector<int64_t>(), in.at("i64").to_vector<int64_t>());  // exact
  EXPECT_EQ(out.at("scalar").dim(), 0);
  EXPECT_EQ(out.at("empty").numel(), 0);
  expect_close(out.at("strided"), {0, 3, 1, 4, 2, 5}, 0);
  EXPECT_TRUE(safetensors_metadata(path).empty());
}

TEST_F(Safetensors, MetadataRoundTrips) {
  std::map<std::string, std::string> meta{{"format", "pt"}, {"note", "a \"quoted\"\nline"}};
  save_safetensors({{"x", ones({2})}}, path_, meta);
  EXPECT_EQ(safetensors_metadata(path_), meta);
  EXPECT_EQ(load_safetensors(path_).size(), 1u);  // __metadata__ is not a tensor
}

TEST_F(Safetensors, FileLayoutIsTheStandardOne) {
  save_safetensors({{"b", from_vector<float>({1, 2})}, {"a", from_vector<int64_t>({7}, {1, 1})}}, path_);
  std::string bytes = read_bytes(path_);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ((8 + n) % 8, 0u);  // data starts aligned
  json h = json::parse(bytes.substr(8, n));
  EXPECT_EQ(h["a"]["dtype"], "I64");
  EXPECT_EQ(h["a"]["shape"], json::array({1, 1}));
  EXPECT_EQ(h["b"]["dtype"], "F32");
  EXPECT_EQ(h["b"]["shape"], json::array({2}));
  uint64_t ab = h["a"]["data_offsets"][0], ae = h["a"]["data_offsets"][1];
  uint64_t bb = h["b"]["data_offsets"][0], be = h["b"]["data_offsets"][1];
  EXPECT_EQ(ae - ab, 8u);
  EXPECT_EQ(be - bb, 8u);
  EXPECT_EQ(bytes.size(), 8 + n + 16);
  int64_t a;
  std::memcpy(&a, bytes.data() + 8 + n + ab, 8);
  EXPECT_EQ(a, 7);
  float b[2];
  std::memcpy(b, bytes.data() + 8 + n + bb, 8);
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(b[1], 2.0f);
}

TEST_F(Safetensors, LoadsAHandWrittenFile) {
  std::string header = R"({"__metadata__":{"k":"v"},"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
                       R"("m":{"dtype":"BOOL","shape":[],"data_offsets":[0,1]}})";
  write_bytes(path_, file_of(header, std::string("\x01\0\0\0", 4) + f32_bytes({2.5f, -1})));
  auto t = load_safetensors(path_);
  expect_close(t.at("w"), {2.5, -1}, 0);
  EXPECT_EQ(t.at("m").dtype(), boolean);
  EXPECT_EQ(t.at("m").item<bool>(), true);
  EXPECT_EQ(safetensors_metadata(path_).at("k"), "v");
}

TEST_F(Safetensors, SaveRejectsWhatTheFormatCannotHold) {
  expect_error([&] { save_safetensors({{"__metadata__", ones({1})}}, path_); }, {"save_safetensors", "reserved"});
  expect_error([&] { save_safetensors({{"x", Tensor()}}, path_); }, {"save_safetensors", "\"x\"", "undefined"});
  expect_error(
      [&] {
        save_safetensors({{"x", ones({1})}}, "/nonexistent-dir/x.safetensors");
      },
      {"save_safetensors", "cannot write"});
}

TEST_F(Safetensors, MissingOrTooShortFilesThrow) {
  expect_error([&] { load_safetensors(temp_path("does-not-exist")); }, {"load_safetensors", "cannot open"});
  expect_rejected("", {"too short"});
  expect_rejected("abc", {"too short"});
}

TEST_F(Safetensors, EveryTruncationOfAValidFileThrows) {
  save_safetensors({{"a", from_vector<float>({1, 2, 3})}, {"b", from_vector<int64_t>({4, 5})}}, path_);
  std::string bytes = read_bytes(path_);
  for (size_t n = 0; n < bytes.size(); ++n) {
    write_bytes(path_, bytes.substr(0, n));
    try {
      load_safetensors(path_);
      ADD_FAILURE() << "a file cut to " << n << " of " << bytes.size() << " bytes loaded";
    } catch (const Error&) {
    }
  }
}

TEST_F(Safetensors, HeaderLengthBeyondTheFileThrows) {
  std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::string data = f32_bytes({1});
  expect_rejected(u64le(header.size() + 5) + header + data, {"header length", "exceeds"});
  expect_rejected(u64le(uint64_t{1} << 63) + header + data, {"header length", "exceeds"});
  expect_rejected(u64le(~uint64_t{0}) + header + data, {"header length"});
  expect_rejected(u64le(200u << 20) + header + data, {"header length"});
}

TEST_F(Safetensors, InvalidJsonThrows) {
  expect_rejected(file_of("{not json", ""), {"not valid JSON"});
  expect_rejected(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", f32_bytes({1})),
                  {"not valid JSON"});
  expect_rejected(file_of("", ""), {"not valid JSON"});
  expect_rejected(file_of(std::string("{\"a\0\":1}", 9), ""), {"load_safetensors"});
  expect_rejected(file_of("[1, 2]", ""), {"JSON object"});
  expect_rejected(file_of("17", ""), {"JSON object"});
  // Deep nesting must not exhaust the stack.
  expect_rejected(file_of(std::string(100000, '[') + std::string(100000, ']'), ""), {"load_safetensors"});
  expect_rejected(file_of("{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}", ""),
                  {"load_safetensors"});
}

TEST_F(Safetensors, EntriesMissingFieldsThrow) {
  std::string d = f32_bytes({1});
  expect_rejected(file_of(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", d), {"\"a\"", "needs dtype"});
  expect_rejected(file_of(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", d), {"\"a\"", "shape"});
  expect_rejected(file_of(R"({"a":{"dtype":"F32","shape":[1]}})", d), {"\"a\"", "data_offsets"});
  expect_rejected(file_of(R"({"a":[1,2,3]})", d), {"\"a\"", "needs dtype"});
  expect_rejected(file_of(R"({"a":"F32"})", d), {"\"a\""});
}

TEST_F(Safetensors, UnknownOrMistypedDtypesThrow) {
  std::string d = f32_bytes({1});
  expect_rejected(file_of(R"({"a":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})", d),
                  {"\"a\"", "unsupported dtype", "F8_E4M3"});
  expect_rejected(file_of(R"({"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", d), {"unsupported dtype"});
  expect_rejected(file_of(R"({"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", d), {"dtype must be a string"});
}

TEST_F(Safetensors, BadShapesThrow) {
  std::string d = f32_bytes({1});
  auto with_shape = [&](const std::string& shape) {
    return file_of(R"({"a":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":[0,4]}})", d);
  };
  expect_rejected(with_shape("[-1]"), {"\"a\"", "non-negative integers"});
  expect_rejected(with_shape("[1.5]"), {"non-negative integers"});
  expect_rejected(with_shape("[\"1\"]"), {"non-negative integers"});
  expect_rejected(with_shape("4"), {"shape must be an array"});
  expect_rejected(with_shape("[" + std::string(40 * 2 - 1, ',') + "]"), {"not valid JSON"});
  std::string many = "[1";
  for (int i = 0; i < 40; ++i) many += ",1";
  expect_rejected(with_shape(many + "]"), {"at most 32"});
  expect_rejected(with_shape("[1099511627776,1099511627776]"), {"too large"});
  expect_rejected(with_shape("[18446744073709551615]"), {"too large"});
  // No elements, but sizes whose strides would overflow.
  expect_rejected(file_of(R"({"a":{"dtype":"F32","shape":[0,1099511627776,1099511627776,1099511627776],)"
                          R"("data_offsets":[0,0]}})",
                          d),
                  {"\"a\"", "too large"});
}

TEST_F(Safetensors, OffsetsOutOfRangeThrow) {
  std::string d = f32_bytes({1, 2, 3, 4});
  auto with_offsets = [&](const std::string& offsets, const std::string& shape = "[4]") {
    return file_of(R"({"a":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}}", d);
  };
  expect_rejected(with_offsets("[0,20]", "[5]"), {"\"a\"", "outside the 16 data bytes"});
  expect_rejected(with_offsets("[16,32]"), {"outside"});
  expect_rejected(with_offsets("[8,4]", "[1]"), {"outside"});
  expect_rejected(with_offsets("[18446744073709551612,18446744073709551615]", "[1]"), {"outside"});
  expect_rejected(with_offsets("[-4,12]"), {"two non-negative integers"});
  expect_rejected(with_offsets("[0,16,32]"), {"two non-negative integers"});
  expect_rejected(with_offsets("[0]"), {"two non-negative integers"});
  expect_rejected(with_offsets("[0.0,16]"), {"two non-negative integers"});
  expect_rejected(with_offsets("\"0-16\""), {"two non-negative integers"});
}

TEST_F(Safetensors, OffsetsNotMatchingTheShapeThrow) {
  std::string d = f32_bytes({1, 2, 3, 4});
  expect_rejected(file_of(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,12]}})", d),
                  {"\"a\"", "span 12 bytes", "needs 16"});
  expect_rejected(file_of(R"({"a":{"dtype":"F64","shape":[2,2],"data_offsets":[0,16]}})", d),
                  {"span 16 bytes", "needs 32"});
  expect_rejected(file_of(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0,0]}})", d), {"needs 4"});
}

TEST_F(Safetensors, OverlappingTensorsThrow) {
  std::string d = f32_bytes({1, 2, 3, 4});
  expect_rejected(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                          d),
                  {"overlap"});
  expect_rejected(file_of(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                          R"("b":{"dtype":"I32","shape":[1],"data_offsets":[8,12]}})",
                          d),
                  {"overlap"});
  // An empty tensor inside another's bytes overlaps it too (the reference implementation
  // requires the tensors to tile the data in order).
  expect_rejected(file_of(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                          R"("c":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                          d),
                  {"overlap"});
  // Touching is fine, and so is an empty tensor between two others.
  write_bytes(path_, file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                             R"("c":{"dtype":"F32","shape":[0],"data_offsets":[8,8]}})",
                             d));
  auto t = load_safetensors(path_);
  expect_close(t.at("b"), {3, 4}, 0);
  EXPECT_EQ(t.at("c").numel(), 0);
}

TEST_F(Safetensors, BoolBytesOtherThanZeroOrOneThrow) {
  expect_rejected(file_of(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", std::string("\x01\x02\x00", 3)),
                  {"\"m\"", "bool entries must be 0 or 1"});
  expect_rejected(file_of(R"({"m":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}})", "\xff"), {"bool"});
}

TEST_F(Safetensors, BadMetadataThrows) {
  std::string d = f32_bytes({1});
  write_bytes(path_, file_of(R"({"__metadata__":[1],"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", d));
  expect_error([&] { safetensors_metadata(path_); }, {"__metadata__", "object"});
  write_bytes(path_, file_of(R"({"__metadata__":{"k":3}})", ""));
  expect_error([&] { safetensors_metadata(path_); }, {"metadata \"k\"", "string"});
}

TEST_F(Safetensors, MutatedFilesLoadOrThrowButNeverCrash) {
  std::map<std::string, Tensor> in;
  in["weight"] = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  in["bias"] = from_vector<double>({0.5, -0.5});
  in["mask"] = from_vector<bool>({true, false, true});
  in["ids"] = from_vector<int32_t>({7, 8});
  in["h"] = from_vector<float>({1, 2}).to(bf16);
  save_safetensors(in, path_, {{"format", "pt"}});
  const std::string valid = read_bytes(path_);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(valid[i]);
  std::mt19937_64 rng(12345);
  const char* tokens[] = {"\"", "{", "}", "[", "]", ",", ":", "-1", "1e30", "null", "99999999999999999999", "0"};
  int loaded = 0, rejected = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::string bytes = valid;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t kind = rng() % 10, pos;
      // Most edits land in the length prefix and header, where the parsing is.
      if (rng() % 4 != 0) pos = rng() % std::min<size_t>(bytes.size(), 8 + header_len);
      else pos = rng() % bytes.size();
      if (kind < 4) bytes[pos] = static_cast<char>(rng());                      // random byte
      else if (kind < 6) bytes[pos] = static_cast<char>('0' + rng() % 10);      // a digit
      else if (kind < 8) bytes.insert(pos, tokens[rng() % std::size(tokens)]);  // a JSON token
      else if (kind < 9) bytes.erase(pos, 1 + rng() % 8);
      else bytes.resize(rng() % bytes.size());
      if (bytes.empty()) break;
    }
    write_bytes(path_, bytes);
    try {
      auto t = load_safetensors(path_);
      for (auto& [name, v] : t) ASSERT_GE(v.numel(), 0);
      ++loaded;
    } catch (const Error&) {
      ++rejected;
    }
    try {
      safetensors_metadata(path_);
    } catch (const Error&) {
    }
  }
  RecordProperty("loaded", loaded);
  EXPECT_EQ(loaded + rejected, 2000);
  EXPECT_GT(rejected, 1000);  // the mutations do reach the checks
  EXPECT_GT(loaded, 0);       // and some keep the file valid (e.g. a changed data byte)
}

// A hostile header fails as it parses, before it is built: a huge array, or nesting deeper
// than the format's. (100 MB of one array once took seconds and gigabytes of JSON values.)
TEST_F(Safetensors, HostileHeadersFailFast) {
  std::string huge = "{\"x\":{\"dtype\":\"F32\",\"shape\":[";
  for (int i = 0; i < (1 << 20); ++i) huge += "1,";
  huge += "1],\"data_offsets\":[0,4]}}";
  auto t0 = std::chrono::steady_clock::now();
  expect_rejected(file_of(huge, f32_bytes({1})), {"load_safetensors", "more than 64 values"});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  expect_rejected(file_of("{\"x\":{\"dtype\":[[[[[\"F32\"]]]]]}}", ""), {"load_safetensors", "nests deeper"});
  expect_rejected(file_of("{\"__metadata__\":{\"k\":{\"deep\":{\"er\":1}}}}", ""), {"nests deeper"});
}

TEST_F(Safetensors, ReadsFromMemoryAsFromAFile) {
  save_safetensors({{"a", from_vector<float>({1, 2, 3})}}, path_);
  auto t = safetensors_from_bytes(read_bytes(path_), "in-memory");
  expect_close(t.at("a"), {1, 2, 3}, 0);
  expect_error([&] { safetensors_from_bytes("abc", "in-memory"); }, {"load_safetensors", "in-memory", "too short"});
}

// A save replaces the old file as a whole: no temporary file is left beside it.
TEST_F(Safetensors, SaveReplacesTheFileAtomically) {
  save_safetensors({{"a", from_vector<float>({1})}}, path_);
  save_safetensors({{"b", from_vector<float>({2, 3})}}, path_);
  auto t = load_safetensors(path_);
  EXPECT_EQ(t.count("a"), 0u);
  expect_close(t.at("b"), {2, 3}, 0);
  std::filesystem::path dir = std::filesystem::path(path_).parent_path();
  std::string stem = std::filesystem::path(path_).filename().string();
  for (const auto& f : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(f.path().filename().string().find("." + stem + ".tmp-"), std::string::npos) << f.path();
}
