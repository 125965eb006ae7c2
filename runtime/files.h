// runtime/files.h -- the file handling every reader and writer shares, written once so that each
// is safe: files we read are bounded by their real size and never followed through a symlink
// where that matters; files we write appear whole or not at all; private folders are checked
// before anything in them is trusted. Internal (not installed).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::files {

/// Why `dir` may not hold private state ("" when it may): it must be a real directory (not a
/// symlink), owned by this user, and not writable by group or others.
std::string private_dir_problem(const std::string& dir);

/// Creates `dir` (and missing parents) mode 0700 if needed, then checks it as above; returns
/// the problem, or "" when the folder is ready.
std::string ensure_private_dir(const std::string& dir);

/// A folder for this user's scratch files: $TMPDIR (or /tmp) / kiln-<uid>, created 0700 and
/// checked. Throws kiln::Error naming the problem when it is unsafe (someone else made it).
std::string user_temp_dir();

/// Reads a whole file of at most `max_bytes`. `what` names the reader in errors ("load_npy").
/// With `no_follow`, a symlink is refused (O_NOFOLLOW). Throws kiln::Error when the file cannot
/// be opened, is not a regular file, is larger than the bound, or changes size while read.
std::string read_bounded(const std::string& path, int64_t max_bytes, const char* what, bool no_follow = false);

/// Writes `bytes` to `path` through a new file beside it (O_EXCL; mode 0666 less the umask, as
/// any new file), then fsync and rename: readers and a crash see the old file or the new one,
/// never a partial one; a symlink at `path` is replaced, never followed.
/// Throws kiln::Error naming `what` and the path on failure; the temporary file is removed.
void write_atomic(const std::string& path, std::string_view bytes, const char* what);
/// The same for a file written in pieces (a header, then each tensor's bytes), never copied whole.
void write_atomic(const std::string& path, std::span<const std::string_view> pieces, const char* what);

/// Creates a new file in `dir` named prefix + random + suffix with O_EXCL and O_NOFOLLOW (never
/// an existing file or link), `mode` before the umask (default: this user only), writes the
/// pieces, fsyncs and returns its path. Throws kiln::Error on failure.
std::string write_new(const std::string& dir, const std::string& prefix, const std::string& suffix,
                      std::span<const std::string_view> pieces, const char* what, unsigned mode = 0600);
inline std::string write_new(const std::string& dir, const std::string& prefix, const std::string& suffix,
                             std::string_view bytes, const char* what, unsigned mode = 0600) {
  return write_new(dir, prefix, suffix, std::span<const std::string_view>(&bytes, 1), what, mode);
}

/// Runs a program without a shell (posix_spawnp with an argv array, so no argument is ever
/// parsed as shell syntax), with `env` ("NAME=value") added to this process's environment and
/// stderr to /dev/null, and returns what it wrote to stdout; nullopt when it could not start or
/// exited with an error.
std::optional<std::string> run_program(const std::vector<std::string>& argv, const std::vector<std::string>& env = {});

}  // namespace kiln::files
