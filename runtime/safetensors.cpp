// runtime/safetensors.cpp -- the safetensors format: u64 header length, JSON header, raw data.
#include "runtime/safetensors.h"

#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/files.h"

namespace kiln {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeader = 100 << 20;  // the format's own limit

struct Code {
  const char* name;
  DType dtype;
};
constexpr Code kCodes[] = {{"F64", DType::F64}, {"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16},
                           {"I64", DType::I64}, {"I32", DType::I32}, {"U8", DType::U8},   {"BOOL", DType::Bool}};

const char* code_of(DType t) {
  for (const Code& c : kCodes)
    if (c.dtype == t) return c.name;
  return nullptr;
}

struct Parsed {
  json header;
  std::string_view data;  // the bytes after the header
};

// Parses the header of the file in `bytes`. The JSON may only be as deep as the format's
// (a tensor's shape array inside its entry) and arrays may hold at most 64 values, checked as
// it parses: a hostile header (100 MB of one array) fails at once, not after building it.
Parsed parse(std::string_view bytes, const std::string& path) {
  uint64_t size = bytes.size();
  KILN_CHECK(size >= 8, "load_safetensors: {}: file too short ({} bytes) for a header", path, size);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  KILN_CHECK(n <= kMaxHeader && n <= size - 8, "load_safetensors: {}: header length {} exceeds the file ({} bytes)",
             path, n, size);
  std::vector<size_t> array_sizes;
  json::parser_callback_t bound = [&](int depth, json::parse_event_t event, json&) {
    if (depth > 3) throw Error(fmt::format("load_safetensors: {}: the header nests deeper than the format does", path));
    if (event == json::parse_event_t::array_start) array_sizes.push_back(0);
    if (event == json::parse_event_t::array_end && !array_sizes.empty()) array_sizes.pop_back();
    if (event == json::parse_event_t::value && !array_sizes.empty() && ++array_sizes.back() > 64)
      throw Error(fmt::format("load_safetensors: {}: a header array holds more than 64 values", path));
    return true;
  };
  Parsed p;
  try {
    p.header = json::parse(bytes.substr(8, n), bound);
  } catch (const json::exception& e) {
    throw Error(fmt::format("load_safetensors: {}: header is not valid JSON: {}", path, e.what()));
  }
  KILN_CHECK(p.header.is_object(), "load_safetensors: {}: header must be a JSON object", path);
  p.data = bytes.substr(8 + n);
  return p;
}

std::string read_file(const std::string& path) {
  return files::read_bounded(path, std::numeric_limits<int64_t>::max(), "load_safetensors");
}

}  // namespace

std::map<std::string, Tensor> load_safetensors(const std::string& path) {
  return safetensors_from_bytes(read_file(path), path);
}

std::map<std::string, Tensor> safetensors_from_bytes(std::string_view bytes, const std::string& path) {
  Parsed p = parse(bytes, path);
  std::map<std::string, Tensor> out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto& item : p.header.items()) {
    const std::string name = item.key();  // named, not bound: lambdas capture it (clang 14)
    const json& entry = item.value();
    if (name == "__metadata__") continue;
    auto bad = [&](const std::string& why) {
      return Error(fmt::format("load_safetensors: {}: tensor \"{}\": {}", path, name, why));
    };
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets"))
      throw bad("needs dtype, shape and data_offsets");
    const json &jd = entry["dtype"], &js = entry["shape"], &jo = entry["data_offsets"];
    if (!jd.is_string()) throw bad("dtype must be a string");
    const Code* code = nullptr;
    for (const Code& c : kCodes)
      if (jd.get<std::string>() == c.name) code = &c;
    if (!code) throw bad("unsupported dtype " + jd.dump());
    if (!js.is_array() || js.size() > 32) throw bad("shape must be an array of at most 32 sizes");
    Dims shape;
    uint64_t numel = 1, extent = 1;  // extent: the nonzero sizes' product, which bounds strides
    for (const json& d : js) {
      if (!d.is_number_unsigned()) throw bad("shape entries must be non-negative integers");
      uint64_t v = d.get<uint64_t>();
      if (v > (uint64_t{1} << 40) || (v != 0 && extent > (uint64_t{1} << 40) / v)) throw bad("shape is too large");
      numel *= v;
      if (v != 0) extent *= v;
      shape.push_back(static_cast<int64_t>(v));
    }
    if (!jo.is_array() || jo.size() != 2 || !jo[0].is_number_unsigned() || !jo[1].is_number_unsigned())
      throw bad("data_offsets must be two non-negative integers");
    uint64_t b = jo[0].get<uint64_t>(), e = jo[1].get<uint64_t>();
    if (b > e || e > p.data.size())
      throw bad(fmt::format("data_offsets [{}, {}] lie outside the {} data bytes", b, e, p.data.size()));
    if (e - b != numel * static_cast<uint64_t>(dtype_size(code->dtype)))
      throw bad(fmt::format("data_offsets span {} bytes but shape {} of {} needs {}", e - b, shape_str(shape),
                            dtype_name(code->dtype), numel * static_cast<uint64_t>(dtype_size(code->dtype))));
    ranges.emplace_back(b, e);
    Tensor t = empty(shape, code->dtype);
    if (e > b) std::memcpy(t.data_ptr(), p.data.data() + b, e - b);
    if (code->dtype == DType::Bool) {
      auto* q = static_cast<uint8_t*>(t.data_ptr());
      for (uint64_t i = 0; i < numel; ++i)
        if (q[i] > 1) throw bad("bool entries must be 0 or 1");
    }
    out[name] = t;
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    KILN_CHECK(ranges[i].first >= ranges[i - 1].second, "load_safetensors: {}: tensors overlap in the data", path);
  return out;
}

std::map<std::string, std::string> safetensors_metadata(const std::string& path) {
  std::string bytes = read_file(path);
  Parsed p = parse(bytes, path);
  std::map<std::string, std::string> out;
  if (!p.header.contains("__metadata__")) return out;
  const json& m = p.header["__metadata__"];
  KILN_CHECK(m.is_object(), "load_safetensors: {}: __metadata__ must be an object", path);
  for (auto& [k, v] : m.items()) {
    KILN_CHECK(v.is_string(), "load_safetensors: {}: metadata \"{}\" must be a string", path, k);
    out[k] = v.get<std::string>();
  }
  return out;
}

SafetensorsPieces safetensors_pieces(const std::map<std::string, Tensor>& tensors,
                                     const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  SafetensorsPieces out;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    KILN_CHECK(name != "__metadata__", "save_safetensors: \"__metadata__\" is reserved");
    KILN_CHECK(t.defined(), "save_safetensors: tensor \"{}\" is undefined", name);
    const char* code = code_of(t.dtype());
    KILN_CHECK(code, "save_safetensors: tensor \"{}\" has unsupported dtype {}", name, dtype_name(t.dtype()));
    uint64_t bytes = static_cast<uint64_t>(t.numel() * dtype_size(t.dtype()));
    header[name] = {{"dtype", code}, {"shape", t.shape().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    out.data.push_back(t.detach().to(Device{}).contiguous());
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  uint64_t n = text.size();
  out.head.resize(8);
  for (int i = 0; i < 8; ++i) out.head[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
  out.head += text;
  return out;
}

std::vector<std::string_view> SafetensorsPieces::views() const {
  std::vector<std::string_view> v = {head};
  for (const Tensor& t : data)
    v.emplace_back(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.numel() * dtype_size(t.dtype())));
  return v;
}

uint64_t SafetensorsPieces::size() const {
  uint64_t n = head.size();
  for (const Tensor& t : data) n += static_cast<uint64_t>(t.numel() * dtype_size(t.dtype()));
  return n;
}

void save_safetensors(const std::map<std::string, Tensor>& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata) {
  SafetensorsPieces p = safetensors_pieces(tensors, metadata);
  std::vector<std::string_view> pieces = p.views();
  files::write_atomic(path, pieces, "save_safetensors");  // never a truncated checkpoint over the old one
}

}  // namespace kiln
