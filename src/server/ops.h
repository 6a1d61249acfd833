// What a load balancer or an LLM router needs from each `lmfuse serve` replica (docs/SCALING.md,
// section 3): draining without a signal (POST /admin/drain, /admin/undrain), liveness apart from
// readiness (GET /health/live, /health/ready), the load in one cheap call (GET /load and the
// x-lmfuse-* headers of the generation responses), and a request id on every response and log
// line (X-Request-Id). The generation endpoints stay in http_server.cpp.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "server/openai.h"
#include "server/scheduler.h"

namespace httplib {
struct Request;
struct Response;
class Server;
}  // namespace httplib

namespace lmf::server {

struct OpsConfig {
  // /health/ready needs at least this fraction of the KV blocks free (free, or held only by the
  // prefix cache, which gives them back on demand). 0.1 with the default pool of -np contexts is
  // about 1.6 full contexts of room at -np 16.
  double ready_min_kv_free = 0.1;
  bool request_log = true;  // one stderr line per request (the probes' 2xx answers left out)
};

// Seconds a client should wait before retrying a 503 (draining, shutting down: another replica
// should take it) and a 429 (this replica's queue is full for now).
constexpr int kRetryAfterUnavailable = 5;
constexpr int kRetryAfterBusy = 1;

// The id of a request: the incoming X-Request-Id when it is 1..kMaxRequestId visible ASCII
// characters (0x21..0x7e: no spaces or control characters, so a log line stays one line and
// splits on spaces), else a new random one (32 hex digits).
constexpr size_t kMaxRequestId = 128;
bool valid_request_id(const std::string& id);
std::string request_id(const std::string& incoming);

// Why the replica should get no new traffic now (empty: ready): "shutting_down", "draining",
// "queue_full", "kv_cache_full".
std::vector<std::string> not_ready_reasons(const LoadSnapshot& l, double min_kv_free);
json load_json(const LoadSnapshot& l);
// x-lmfuse-queue (waiting requests) and x-lmfuse-kv-free (free KV blocks, as in /load).
void set_load_headers(httplib::Response& res, const LoadSnapshot& l);

using Authorize = std::function<bool(const httplib::Request&, httplib::Response&)>;
// Registers the routes above, the X-Request-Id of every response (also 404s and httplib's own
// 400 / 413) and the request log.
void add_ops_routes(httplib::Server& svr, Scheduler& sched, const OpsConfig& cfg, Authorize authorized);

}  // namespace lmf::server
