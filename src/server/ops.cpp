#include "server/ops.h"

#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>

namespace lmf::server {

bool valid_request_id(const std::string& id) {
  if (id.empty() || id.size() > kMaxRequestId) return false;
  for (unsigned char c : id)
    if (c < 0x21 || c > 0x7e) return false;
  return true;
}

std::string request_id(const std::string& incoming) {
  if (valid_request_id(incoming)) return incoming;
  static std::mt19937_64 rng{std::random_device{}()};
  static std::mutex mu;
  uint64_t a, b;
  {
    std::lock_guard<std::mutex> lock(mu);
    a = rng();
    b = rng();
  }
  char s[33];
  std::snprintf(s, sizeof s, "%016llx%016llx", (unsigned long long)a, (unsigned long long)b);
  return s;
}

std::vector<std::string> not_ready_reasons(const LoadSnapshot& l, double min_kv_free) {
  std::vector<std::string> r;
  if (l.stopping) r.push_back("shutting_down");
  if (l.draining) r.push_back("draining");
  if (l.queue >= l.max_queue) r.push_back("queue_full");
  if (l.kv_total > 0 && double(l.kv_free) < min_kv_free * double(l.kv_total)) r.push_back("kv_cache_full");
  return r;
}

json load_json(const LoadSnapshot& l) {
  return {{"queue_length", l.queue},
          {"max_queue", l.max_queue},
          {"active", l.active},
          {"max_active", l.max_active},
          {"kv_blocks_free", l.kv_free},
          {"kv_blocks_used", l.kv_used},
          {"kv_blocks_total", l.kv_total},
          {"kv_block_size", l.block_size},
          {"tokens_in_flight", l.tokens_active + l.tokens_queued},
          {"tokens_active", l.tokens_active},
          {"tokens_queued", l.tokens_queued},
          {"draining", l.draining}};
}

void set_load_headers(httplib::Response& res, const LoadSnapshot& l) {
  res.set_header("x-lmfuse-queue", std::to_string(l.queue));
  res.set_header("x-lmfuse-kv-free", std::to_string(l.kv_free));
}

namespace {

// When this HTTP thread started the request it is on (httplib runs a request, its streamed body
// included, on one thread); zero when httplib answered before routing (a bad request line).
thread_local std::chrono::steady_clock::time_point t_start{};

bool is_probe(const httplib::Request& req) {
  return req.method == "GET" && (req.path == "/health" || req.path == "/health/live" || req.path == "/health/ready" ||
                                 req.path == "/load" || req.path == "/metrics");
}

}  // namespace

void add_ops_routes(httplib::Server& svr, Scheduler& sched, const OpsConfig& cfg, Authorize authorized) {
  auto drain = [&sched, authorized](bool on, const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    sched.set_draining(on);
    const LoadSnapshot l = sched.load();
    std::fprintf(stderr, "lmfuse serve: %s (%lld running, %lld queued)\n",
                 on ? "draining: new requests get 503" : "undrained: admitting requests", (long long)l.active,
                 (long long)l.queue);
    res.set_content(json{{"draining", on}, {"active", l.active}, {"queue_length", l.queue}}.dump(), "application/json");
  };
  svr.set_pre_routing_handler([drain](const httplib::Request& req, httplib::Response& res) {
    t_start = std::chrono::steady_clock::now();
    // `curl -X POST .../admin/drain` sends no Content-Length: answered here, before httplib would
    // wait for a body that never comes. One with a body takes the routes below.
    if (req.method == "POST" && (req.path == "/admin/drain" || req.path == "/admin/undrain") &&
        !req.has_header("Content-Length") && !req.has_header("Transfer-Encoding")) {
      drain(req.path == "/admin/drain", req, res);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // After every handler (and httplib's own error statuses), before the headers go out.
  svr.set_post_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.has_header("X-Request-Id")) res.set_header("X-Request-Id", request_id(req.get_header_value("X-Request-Id")));
  });
  if (cfg.request_log)
    svr.set_logger([](const httplib::Request& req, const httplib::Response& res) {
      const auto t0 = t_start;
      t_start = {};
      if (is_probe(req) && res.status < 300) return;
      char dt[32] = "-";
      if (t0 != std::chrono::steady_clock::time_point{})
        std::snprintf(dt, sizeof dt, "%.3f", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      // The path without its query, cut short: a log line stays one bounded line.
      const std::string path = req.path.substr(0, 200);
      std::fprintf(stderr, "lmfuse serve: %d %s %s %s s id=%s from %s\n", res.status, req.method.substr(0, 16).c_str(),
                   path.c_str(), dt, res.get_header_value("X-Request-Id").c_str(), req.remote_addr.c_str());
    });

  svr.Post("/admin/drain", [drain](const httplib::Request& req, httplib::Response& res) { drain(true, req, res); });
  svr.Post("/admin/undrain", [drain](const httplib::Request& req, httplib::Response& res) { drain(false, req, res); });
  // Liveness: the process serves HTTP (also while draining or shutting down: restarting it then
  // would cut the streams the drain lets finish).
  svr.Get("/health/live", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"live"})", "application/json");
  });
  // Readiness: worth sending new requests to. The listener opens once the model is loaded, so a
  // replica that answers has its model.
  svr.Get("/health/ready", [&sched, min = cfg.ready_min_kv_free](const httplib::Request&, httplib::Response& res) {
    const LoadSnapshot l = sched.load();
    const auto why = not_ready_reasons(l, min);
    if (why.empty()) return res.set_content(R"({"status":"ready"})", "application/json");
    res.status = 503;
    if (l.stopping || l.draining) res.set_header("Retry-After", std::to_string(kRetryAfterUnavailable));
    res.set_content(json{{"status", "not_ready"}, {"reasons", why}, {"load", load_json(l)}}.dump(), "application/json");
  });
  svr.Get("/load", [&sched, authorized](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    const LoadSnapshot l = sched.load();
    set_load_headers(res, l);
    res.set_content(load_json(l).dump(), "application/json");
  });
}

}  // namespace lmf::server
