// runtime/check.h -- the two checking macros used inside kiln (not part of the public headers).
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/error.h"

/// Throws kiln::Error with an fmt message when `cond` is false: KILN_CHECK(ok, "op: {} vs {}", a, b).
#define KILN_CHECK(cond, ...) ((cond) ? void() : ::kiln::throw_error(::fmt::format(__VA_ARGS__)))
/// Throws kiln::InternalError when an invariant of ours is broken.
#define KILN_ASSERT(cond) ((cond) ? void() : ::kiln::throw_internal(#cond, __FILE__, __LINE__))
