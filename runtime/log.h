// runtime/log.h -- KILN_LOG=jit,codegen,cache,cuda (or all): what kiln tells on stderr.
#pragma once

#include <string_view>

namespace kiln {

enum class LogTopic : uint8_t { Jit, Codegen, Cache, Cuda };

/// True when KILN_LOG names the topic (read once).
bool log_enabled(LogTopic topic);
/// Writes "[kiln:<topic>] message" to stderr when the topic is on.
void log(LogTopic topic, std::string_view message);
/// Writes "[kiln:warning] message" to stderr whatever KILN_LOG says: something the user must
/// fix, that kiln works around (an unsafe cache folder).
void warn(std::string_view message);

}  // namespace kiln
