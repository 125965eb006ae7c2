// jit/module_file.h -- the container of a saved module (jit::save): magic, format version,
// then three sections. Data only: no machine code, nothing a reader runs.
//
//   bytes 0-7    "KILNMOD\0"
//   bytes 8-11   format version, u32 little-endian
//   then, three times, in this order:
//     4 bytes    tag: "META" (JSON metadata), "IR  " (the graph as IR text),
//                "TENS" (parameters and constants: a whole safetensors file)
//     8 bytes    length, u64 little-endian
//     length     bytes
//   and nothing after the last section.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::jit {

inline constexpr std::string_view kModuleMagic{"KILNMOD\0", 8};
/// The format this kiln writes; it reads every version from 1 to this one.
inline constexpr uint32_t kModuleFormat = 1;

/// A module file's sections, viewing the bytes they were read from.
struct ModuleSections {
  uint32_t version = 0;
  std::string_view meta, ir, tensors;
};

/// Whether `bytes` start like a module file.
bool is_module_file(std::string_view bytes);
/// Splits a module file into its sections. Hostile input: every length is checked against the
/// bytes there are before anything is read; a wrong magic, a version outside 1..kModuleFormat
/// ("written by format 3; this kiln reads 1..1"), a missing, reordered or truncated section or
/// trailing bytes throw kiln::Error naming `name`.
ModuleSections split_module(std::string_view bytes, const std::string& name);
/// The header and section framing for sections of these sizes; the caller writes, after it,
/// the meta and IR bytes, the tensors' header and data, interleaved as `module_pieces` does.
std::vector<std::string> module_frames(uint64_t meta, uint64_t ir, uint64_t tensors);

}  // namespace kiln::jit
