// runtime/safetensors.h -- tensors to and from the safetensors format (Hugging Face's), so weights
// move between kiln, PyTorch, JAX and others.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/tensor.h"

namespace kiln {

/// Writes `tensors` (any layout; stored contiguous, little-endian) with optional string
/// metadata. dtypes: f64 f32 f16 bf16 i64 i32 u8 bool. The file is replaced atomically (written
/// beside it, then renamed): a crash mid-save leaves the old file, never a truncated one.
void save_safetensors(const std::map<std::string, Tensor>& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata = {});
/// Reads every tensor of a safetensors file. The file is treated as hostile: the header
/// length, JSON, dtypes, shapes and offsets are all checked, and anything wrong throws
/// kiln::Error naming the file and the entry.
std::map<std::string, Tensor> load_safetensors(const std::string& path);
/// The same reader over a file's bytes in memory; `name` stands for the file in errors.
std::map<std::string, Tensor> safetensors_from_bytes(std::string_view bytes, const std::string& name = "<bytes>");
/// A safetensors file as the pieces it is written from, for writers that embed one in a file of
/// their own (jit::save) without copying the tensors: `head` (the length and the JSON header),
/// then each of `data`'s bytes, in order.
struct SafetensorsPieces {
  std::string head;
  std::vector<Tensor> data;  // contiguous CPU copies (or the tensors themselves)
  std::vector<std::string_view> views() const;
  uint64_t size() const;
};
SafetensorsPieces safetensors_pieces(const std::map<std::string, Tensor>& tensors,
                                     const std::map<std::string, std::string>& metadata = {});
/// The metadata of a safetensors file ("__metadata__").
std::map<std::string, std::string> safetensors_metadata(const std::string& path);

}  // namespace kiln
