// runtime/npy.cpp -- NumPy .npy files. The reader treats the file as hostile: every length is
// checked before it is used, and any malformed header gives a kiln::Error naming the file.
#include <cstring>
#include <limits>

#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/files.h"

namespace kiln {
namespace {

const char kMagic[] = "\x93NUMPY";

struct Descr {
  const char* code;
  DType dtype;
};
constexpr Descr kDescrs[] = {{"f4", DType::F32}, {"f8", DType::F64}, {"f2", DType::F16}, {"i4", DType::I32},
                             {"i8", DType::I64}, {"u1", DType::U8},  {"b1", DType::Bool}};

// The value text after 'key': in the header dict, up to the next top-level comma.
std::string dict_value(const std::string& h, const std::string& key, const std::string& path) {
  size_t k = h.find("'" + key + "'");
  KILN_CHECK(k != std::string::npos, "load_npy: {}: header has no '{}'", path, key);
  size_t c = h.find(':', k);
  KILN_CHECK(c != std::string::npos, "load_npy: {}: malformed header near '{}'", path, key);
  size_t i = c + 1;
  while (i < h.size() && h[i] == ' ') ++i;
  size_t end = i;
  int depth = 0;
  for (; end < h.size(); ++end) {
    char ch = h[end];
    if (ch == '(' || ch == '[') ++depth;
    if (ch == ')' || ch == ']') --depth;
    if ((ch == ',' || ch == '}') && depth <= 0) break;
  }
  KILN_CHECK(depth <= 0 && end < h.size(), "load_npy: {}: malformed value of '{}'", path, key);
  return h.substr(i, end - i + (h[end] == ')' ? 1 : 0));
}

Dims parse_shape(const std::string& v, const std::string& path) {
  KILN_CHECK(v.size() >= 2 && v.front() == '(' && v.back() == ')', "load_npy: {}: bad shape {}", path, v);
  Dims shape;
  size_t i = 1;
  int64_t total = 1;  // product of the nonzero dims: a zero must not hide huge ones
  while (i + 1 < v.size()) {
    while (i < v.size() && (v[i] == ' ' || v[i] == ',')) ++i;
    if (i + 1 >= v.size()) break;
    KILN_CHECK(std::isdigit(static_cast<unsigned char>(v[i])), "load_npy: {}: bad shape {}", path, v);
    int64_t d = 0;
    while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i]))) {
      KILN_CHECK(d < (int64_t{1} << 48), "load_npy: {}: dimension too large in {}", path, v);
      d = d * 10 + (v[i++] - '0');
    }
    KILN_CHECK(d == 0 || total <= (int64_t{1} << 48) / d, "load_npy: {}: shape {} is too large", path, v);
    total *= std::max<int64_t>(d, 1);
    shape.push_back(d);
    KILN_CHECK(shape.size() <= 32, "load_npy: {}: too many dimensions in {}", path, v);
  }
  return shape;
}

}  // namespace

Tensor npy_from_bytes(std::string_view bytes, const std::string& path) {
  int64_t file_size = static_cast<int64_t>(bytes.size());
  size_t at = 0;  // the read position
  auto read = [&](void* dst, int64_t n) {
    if (n < 0 || static_cast<uint64_t>(n) > bytes.size() - at) return false;
    if (n > 0) std::memcpy(dst, bytes.data() + at, static_cast<size_t>(n));
    at += static_cast<size_t>(n);
    return true;
  };
  char pre[10];
  KILN_CHECK(file_size >= 10 && read(pre, 10), "load_npy: {}: file too short for a .npy header", path);
  KILN_CHECK(std::memcmp(pre, kMagic, 6) == 0, "load_npy: {}: not a .npy file (bad magic)", path);
  int major = static_cast<unsigned char>(pre[6]);
  KILN_CHECK(major >= 1 && major <= 3, "load_npy: {}: unsupported format version {}", path, major);
  int64_t header_len, header_start;
  if (major == 1) {
    header_len = static_cast<unsigned char>(pre[8]) | (static_cast<unsigned char>(pre[9]) << 8);
    header_start = 10;
  } else {
    char b[2];
    KILN_CHECK(file_size >= 12 && read(b, 2), "load_npy: {}: truncated header", path);
    header_len = static_cast<unsigned char>(pre[8]) | (static_cast<unsigned char>(pre[9]) << 8) |
                 (static_cast<int64_t>(static_cast<unsigned char>(b[0])) << 16) |
                 (static_cast<int64_t>(static_cast<unsigned char>(b[1])) << 24);
    header_start = 12;
  }
  KILN_CHECK(header_len <= 1 << 20 && header_start + header_len <= file_size,
             "load_npy: {}: header length {} exceeds the file", path, header_len);
  std::string h(static_cast<size_t>(header_len), '\0');
  KILN_CHECK(read(h.data(), header_len), "load_npy: {}: truncated header", path);
  std::string descr = dict_value(h, "descr", path);
  KILN_CHECK(descr.size() == 5 && (descr[0] == '\'' || descr[0] == '"') && descr[4] == descr[0],
             "load_npy: {}: unsupported descr {}", path, descr);
  char order = descr[1];
  std::string code = descr.substr(2, 2);
  const Descr* found = nullptr;
  for (const Descr& d : kDescrs)
    if (code == d.code) found = &d;
  KILN_CHECK(found, "load_npy: {}: unsupported dtype '{}' (supported: f2 f4 f8 i4 i8 u1 b1)", path, descr);
  KILN_CHECK(order == '<' || order == '|' || order == '=', "load_npy: {}: big-endian data ({}) is not supported", path,
             descr);
  std::string fortran = dict_value(h, "fortran_order", path);
  KILN_CHECK(fortran == "False" || fortran == "True", "load_npy: {}: bad fortran_order {}", path, fortran);
  Dims shape = parse_shape(dict_value(h, "shape", path), path);

  int64_t nbytes = shape.product() * dtype_size(found->dtype);
  KILN_CHECK(file_size - header_start - header_len >= nbytes,
             "load_npy: {}: data is truncated: shape {} needs {} bytes, file has {}", path, shape_str(shape), nbytes,
             file_size - header_start - header_len);
  Dims stored = shape;
  if (fortran == "True") std::reverse(stored.begin(), stored.end());
  Tensor t = empty(stored, found->dtype);
  KILN_CHECK(read(t.data_ptr(), nbytes), "load_npy: {}: read failed", path);
  if (found->dtype == DType::Bool) {  // only 0 and 1 are valid bools
    auto* p = static_cast<uint8_t*>(t.data_ptr());
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = p[i] != 0;
  }
  if (fortran == "True") {
    Dims order;
    for (int64_t i = t.dim() - 1; i >= 0; --i) order.push_back(i);
    t = t.permute(order).contiguous();
  }
  return t;
}

Tensor load_npy(const std::string& path) {
  return npy_from_bytes(files::read_bounded(path, std::numeric_limits<int64_t>::max(), "load_npy"), path);
}

void save_npy(const Tensor& t, const std::string& path) {
  KILN_CHECK(t.defined(), "save_npy: the tensor is undefined");
  const Descr* found = nullptr;
  for (const Descr& d : kDescrs)
    if (d.dtype == t.dtype()) found = &d;
  KILN_CHECK(found, "save_npy: {} has no NumPy dtype; cast it (e.g. to f32) first", t.type().str());
  std::string shape;
  for (int64_t d : t.shape()) shape += fmt::format("{}, ", d);
  if (t.dim() == 1) shape.pop_back();                    // (3,) for 1-d
  else if (t.dim() > 1) shape.resize(shape.size() - 2);  // (3, 4)
  char order = (t.dtype() == DType::U8 || t.dtype() == DType::Bool) ? '|' : '<';
  std::string h =
      fmt::format("{{'descr': '{}{}', 'fortran_order': False, 'shape': ({}), }}", order, found->code, shape);
  size_t total = 10 + h.size() + 1;
  h.append((64 - total % 64) % 64, ' ');
  h.push_back('\n');
  uint16_t len = static_cast<uint16_t>(h.size());
  char head[10] = {kMagic[0],
                   kMagic[1],
                   kMagic[2],
                   kMagic[3],
                   kMagic[4],
                   kMagic[5],
                   1,
                   0,
                   static_cast<char>(len & 0xff),
                   static_cast<char>(len >> 8)};
  Tensor c = t.contiguous();
  std::string_view pieces[] = {
      {head, 10}, h, {static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel() * dtype_size(c.dtype()))}};
  files::write_atomic(path, pieces, "save_npy");
}

}  // namespace kiln
