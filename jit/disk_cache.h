// jit/disk_cache.h -- compiled kernels on disk, so a second process starts warm.
//
// One file per kernel under KILN_CACHE_DIR (default $XDG_CACHE_HOME/kiln, else ~/.cache/kiln;
// KILN_CACHE_DIR=off disables it), created 0700. A file is named by a hash of its identity (the
// kernel's source, the target and compiler, kiln's version) and holds that identity in full,
// so a hash collision is detected, plus an xxh64 checksum of everything. Files are written to
// a temporary name and renamed, so readers never see half a file; a file that fails any check
// is ignored (and recompiled over). The directory is capped (KILN_CACHE_MAX_MB, default 1024):
// past the cap, the least recently used files go.
//
// The cache holds machine code that kiln runs without further checks: it is trusted local
// state. So the folder must be the user's own: a real directory (not a symlink), owned by this
// user and not writable by others; else kiln warns once and runs without the cache. Entries are
// read without following symlinks and bounded in size; a writer that died mid-write leaves a
// temporary file that a later scan removes after an hour. Eviction scans the folder on a
// process's first write, then every 64 writes or when its running estimate passes the cap.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::jit {

/// The cache directory in effect ("" when disabled).
std::string disk_cache_dir();
/// The object stored for `identity`, when a sound entry exists.
std::optional<std::string> disk_cache_get(const std::string& identity);
/// Stores `object` for `identity` (best effort: a full or read-only disk only costs a recompile).
void disk_cache_put(const std::string& identity, const std::string& object);
/// An entry's object when `bytes` is a sound entry written for `identity`; else nullopt, with the
/// reason in `why` (the reader's checks, apart from the file handling; fuzzed).
std::optional<std::string> disk_cache_decode(std::string_view bytes, const std::string& identity,
                                             std::string* why = nullptr);
/// The file an identity maps to (for tests and tools).
std::string disk_cache_path(const std::string& identity);

}  // namespace kiln::jit
