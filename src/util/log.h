// Minimal leveled logging to stderr. LMFUSE_LOG=debug|info|warn|error (default warn).
#pragma once
#include <string>

#include "util/status.h"

namespace lmf {
enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3 };
LogLevel log_level();
void set_log_level(LogLevel l);
void log_write(LogLevel l, const std::string& msg);
}  // namespace lmf

#define LMF_LOG(level, ...)                                                        \
  do {                                                                             \
    if (::lmf::LogLevel::level >= ::lmf::log_level())                              \
      ::lmf::log_write(::lmf::LogLevel::level, ::lmf::cat(__VA_ARGS__));           \
  } while (0)
