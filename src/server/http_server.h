// `lmfuse serve`'s HTTP layer (cpp-httplib): routes, the API key, body limits, JSON errors and
// server-sent events. It only translates: generation happens in the Scheduler's thread, and each
// HTTP thread waits on its request's events.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/engine.h"
#include "server/metrics.h"
#include "server/ops.h"
#include "server/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace lmf::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;              // empty: no key
  std::string model_name;           // the id /v1/models reports
  int64_t max_body_bytes = 8 << 20;
  int64_t max_tokens_cap = 0;       // 0: the context
  int http_threads = 0;             // 0: slots + queue bound + 8 (every waiting stream holds one)
  SchedulerConfig sched;
  OpsConfig ops;                    // drain, probes, /load, request ids and the request log (ops.h)
};

class HttpServer {
 public:
  HttpServer(Engine& e, const Tokenizer& t, const ServerConfig& c);
  ~HttpServer();
  // Binds (a clear error when the address is taken) and serves until stop(). Returns the bound port
  // through on_listening before serving (port 0 picks a free one).
  void run(const std::function<void(int port)>& on_listening);
  // From any thread (a signal watcher): lets running requests finish for up to `drain`, then
  // stops listening; run() returns.
  void stop(std::chrono::milliseconds drain);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lmf::server
