// lmfuse serve: the OpenAI-compatible server (src/server) on a model loaded once; SIGINT /
// SIGTERM let running requests finish (up to --shutdown-timeout) and then exit.
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "cli_common.h"
#include "util/status.h"

#ifndef LMFUSE_HAVE_SERVER
namespace lmf::cli {
int cmd_serve(int, char**) {
  LMF_FAIL("this lmfuse was built without cpp-httplib (a bench-only build): no serve command");
}
}  // namespace lmf::cli
#else
#include "runtime/engine.h"
#include "runtime/load.h"
#include "server/http_server.h"
#include "tokenizer/tokenizer.h"

namespace lmf::cli {
namespace {

volatile std::sig_atomic_t g_signal = 0;
void on_signal(int s) { g_signal = s; }

}  // namespace

int cmd_serve(int argc, char** argv) {
  CLI::App app{"Serve a model over an OpenAI-compatible HTTP API (chat, completions, streaming), with continuous\n"
               "batching of concurrent requests, a prefix cache, Prometheus metrics and a chat page at /.\n\n"
               "examples:\n"
               "  lmfuse serve -m models/smollm2-135m-instruct-q4_1.gguf            # http://127.0.0.1:8080/\n"
               "  lmfuse serve -m q.gguf --host 0.0.0.0 --port 9000 -np 32 --api-key secret\n"
               "  curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\\n"
               "       -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}'",
               "lmfuse serve"};
  EngineFlags ef;
  add_engine_flags(app, ef);
  server::ServerConfig sc;
  int64_t kv_budget_mib = 0, shutdown_s = 10;
  app.add_option("--host", sc.host, "address to listen on (default 127.0.0.1)");
  app.add_option("--port", sc.port, "port (default 8080; 0 picks a free one)")->check(in_range(0, 65535));
  app.add_option("--parallel", sc.sched.max_active, "-np / --parallel: sequences decoding together (default 16)")
      ->check(in_range(1, 1024));
  app.add_option("--queue", sc.sched.max_queue, "requests that may wait for a slot; more get 429 (default 64)")
      ->check(in_range(0, 100000));
  app.add_option("--kv-budget", kv_budget_mib,
                 "MiB for the KV cache of all requests (default: -np contexts within half the free memory)")
      ->check(at_least(0));
  app.add_option("--prefill-chunk", sc.sched.prefill_budget, "prompt tokens per batch step (default 256)")
      ->check(in_range(1, 65536));
  app.add_option("--api-key", sc.api_key, "require 'Authorization: Bearer KEY' (default: none; $LMFUSE_API_KEY)");
  app.add_option("--alias", sc.model_name, "model id reported by /v1/models (default: the file's name)");
  app.add_option("--max-tokens", sc.max_tokens_cap, "largest max_tokens a request may ask (default: the context)")
      ->check(at_least(1));
  app.add_option("--max-body", sc.max_body_bytes, "largest request body in bytes (default 8 MiB)")->check(at_least(1024));
  app.add_option("--ready-min-kv-free", sc.ops.ready_min_kv_free,
                 "GET /health/ready answers 503 below this fraction of free KV blocks (default 0.1)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_flag("!--no-request-log", sc.ops.request_log,
               "no stderr line per request (status, method, path, seconds, X-Request-Id; default: on, probes' 2xx left out)");
  app.add_option("--shutdown-timeout", shutdown_s, "seconds running requests may finish after SIGINT/SIGTERM (default 10)")
      ->check(at_least(0));
  CLI11_PARSE(app, argc, argv);
  if (sc.api_key.empty())
    if (const char* k = std::getenv("LMFUSE_API_KEY")) sc.api_key = k;
  if (sc.model_name.empty()) sc.model_name = std::filesystem::path(ef.model).filename().string();

  Loaded l = load_engine(ef);
  if (!l.model->file->find("tokenizer.ggml.model")) LMF_FAIL(ef.model, ": no tokenizer in this GGUF; the server needs one");
  auto tok = Tokenizer::from_gguf(*l.model->file);
  if (!l.backend->paged_kv())
    LMF_FAIL("lmfuse serve needs a backend with a paged KV cache (batched steps); ", l.backend->name(),
             " keeps one sequence's cache for now: use --device cpu");
  // A step holds the decode rows of every slot plus the prompt chunk: within the backend's rows.
  if (const int64_t rows = l.backend->max_batch_rows(); sc.sched.prefill_budget + sc.sched.max_active > rows)
    LMF_FAIL("--prefill-chunk ", sc.sched.prefill_budget, " + --parallel ", sc.sched.max_active, " exceed the ", rows,
             " rows ", l.backend->name(), " runs per step");
  EngineConfig ec;
  ec.n_ctx = l.backend->options().n_ctx;
  ec.kv_positions = kv_positions_for_budget(*l.model, *l.backend, uint64_t(kv_budget_mib) << 20, ec.n_ctx,
                                            sc.sched.max_active);
  lmf::Engine engine(*l.model, *l.backend, ec);
  server::HttpServer srv(engine, *tok, sc);

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGPIPE, SIG_IGN);  // a client that goes away is a failed write, not a dead server
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    while (!done && !g_signal) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (g_signal) {
      std::fprintf(stderr, "lmfuse serve: %s: finishing running requests (up to %lld s)\n",
                   g_signal == SIGINT ? "SIGINT" : "SIGTERM", (long long)shutdown_s);
      srv.stop(std::chrono::seconds(shutdown_s));
    }
  });
  try {
    srv.run([&](int port) {
      std::fprintf(stderr, "lmfuse serve: %s on %s, %lld slots, context %lld, KV cache %lld positions\n",
                   sc.model_name.c_str(), l.backend->description().c_str(), (long long)sc.sched.max_active,
                   (long long)ec.n_ctx, (long long)engine.kv().capacity());
      std::printf("listening on http://%s:%d/\n", sc.host.c_str(), port);
      std::fflush(stdout);
    });
  } catch (...) {
    done = true;
    watcher.join();
    throw;
  }
  done = true;
  watcher.join();
  std::fprintf(stderr, "lmfuse serve: stopped\n");
  return 0;
}

}  // namespace lmf::cli
#endif  // LMFUSE_HAVE_SERVER
