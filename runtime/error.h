// runtime/error.h -- the two kinds of failure: a user's mistake, and a bug of ours.
#pragma once

#include <stdexcept>
#include <string>

namespace kiln {

/// Bad input: wrong shapes, dtypes, indices, files. The message names the op, the tensor types
/// involved (`f32[2,3]`) and what was expected, like "matmul: inner dimensions differ: ...".
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Memory ran out: an allocation failed after the allocator returned what it had cached and tried
/// again. The message names the op (when one was running) and the bytes.
struct OutOfMemory : Error {
  using Error::Error;
};

/// A broken invariant inside kiln. Library code never catches it.
struct InternalError : std::logic_error {
  using std::logic_error::logic_error;
};

[[noreturn]] void throw_error(const std::string& message);
[[noreturn]] void throw_internal(const char* cond, const char* file, int line);

}  // namespace kiln
