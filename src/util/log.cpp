#include "util/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace lmf {

static LogLevel initial_level() {
  const char* v = std::getenv("LMFUSE_LOG");
  if (!v) return LogLevel::Warn;
  if (!std::strcmp(v, "debug")) return LogLevel::Debug;
  if (!std::strcmp(v, "info")) return LogLevel::Info;
  if (!std::strcmp(v, "error")) return LogLevel::Error;
  return LogLevel::Warn;
}

static LogLevel g_level = initial_level();
LogLevel log_level() { return g_level; }
void set_log_level(LogLevel l) { g_level = l; }

void log_write(LogLevel l, const std::string& msg) {
  static const char* names[] = {"debug", "info", "warning", "error"};
  std::fprintf(stderr, "lmfuse %s: %s\n", names[int(l)], msg.c_str());
}

}  // namespace lmf
