// The server's counters and histograms, rendered as Prometheus text for GET /metrics. Updated by
// the scheduler thread and the HTTP threads under one mutex (a few updates per token).
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace lmf::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v);
  // Prometheus text of a histogram named `name` (seconds).
  std::string render(const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct Metrics {
  std::mutex mu;
  uint64_t requests = 0, requests_ok = 0, requests_error = 0, requests_rejected = 0, requests_cancelled = 0;
  uint64_t requests_draining = 0;  // refused with 503 while draining
  uint64_t prompt_tokens = 0, completion_tokens = 0;
  uint64_t steps = 0, step_rows = 0;
  int64_t queue_length = 0, active = 0, batch_size = 0;  // gauges (last step)
  int64_t kv_blocks_used = 0, kv_blocks_total = 0;
  int64_t kv_blocks_evictable = 0;  // held only by the prefix cache
  int64_t tokens_active = 0;        // positions of the active sequences (prompt + generated so far)
  int64_t prefix_lookup_tokens = 0, prefix_hit_tokens = 0, prefix_entries = 0;
  Histogram ttft{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
  Histogram token_latency{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}};
  Histogram batch{{1, 2, 4, 8, 16, 32, 64, 128}};

  // Labels of lmfuse_build_info (set once, before serving).
  std::string model_name, version;

  std::string render();
};

}  // namespace lmf::server
