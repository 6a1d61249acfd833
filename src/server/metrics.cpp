#include "server/metrics.h"

#include <sstream>

namespace lmf::server {

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

std::string Histogram::render(const std::string& name, const std::string& help) const {
  std::ostringstream o;
  o << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    o << name << "_bucket{le=\"" << bounds_[i] << "\"} " << cum << "\n";
  }
  cum += counts_.back();
  o << name << "_bucket{le=\"+Inf\"} " << cum << "\n" << name << "_sum " << sum_ << "\n" << name << "_count " << count_ << "\n";
  return o.str();
}

namespace {

// A Prometheus label value: backslash, double quote and newline escaped.
std::string label(const std::string& v) {
  std::string o;
  for (char c : v) {
    if (c == '\\' || c == '"') o += '\\';
    if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

}  // namespace

std::string Metrics::render() {
  std::lock_guard<std::mutex> lock(mu);
  std::ostringstream o;
  auto counter = [&](const char* n, const char* help, uint64_t v) {
    o << "# HELP lmfuse_" << n << " " << help << "\n# TYPE lmfuse_" << n << " counter\nlmfuse_" << n << " " << v << "\n";
  };
  auto gauge = [&](const char* n, const char* help, double v) {
    o << "# HELP lmfuse_" << n << " " << help << "\n# TYPE lmfuse_" << n << " gauge\nlmfuse_" << n << " " << v << "\n";
  };
  o << "# HELP lmfuse_build_info The model served and the lmfuse version (always 1), to tell a mixed fleet apart.\n"
       "# TYPE lmfuse_build_info gauge\nlmfuse_build_info{model=\"" << label(model_name) << "\",version=\"" << label(version)
    << "\"} 1\n";
  counter("requests_total", "Generation requests received.", requests);
  counter("requests_succeeded_total", "Requests that finished (stop or length).", requests_ok);
  counter("requests_failed_total", "Requests that ended with an error.", requests_error);
  counter("requests_rejected_total", "Requests refused because the queue was full (429).", requests_rejected);
  counter("requests_draining_total", "Requests refused with 503 while draining (POST /admin/drain).", requests_draining);
  counter("requests_cancelled_total", "Requests whose client went away before the end.", requests_cancelled);
  counter("prompt_tokens_total", "Prompt tokens of the requests (cached or computed).", prompt_tokens);
  counter("completion_tokens_total", "Tokens generated.", completion_tokens);
  counter("steps_total", "Batch steps run.", steps);
  counter("step_rows_total", "Sequences advanced, summed over the steps.", step_rows);
  gauge("queue_length", "Requests waiting for a slot.", double(queue_length));
  gauge("active_requests", "Requests in the running batch.", double(active));
  gauge("batch_size", "Sequences in the last step.", double(batch_size));
  gauge("kv_blocks_used", "KV cache blocks in use (sequences and the prefix cache).", double(kv_blocks_used));
  gauge("kv_blocks_total", "KV cache blocks in the pool.", double(kv_blocks_total));
  gauge("kv_blocks_evictable", "KV cache blocks held only by the prefix cache (given back on demand).",
        double(kv_blocks_evictable));
  gauge("tokens_active", "Positions held by the running sequences (prompt + generated so far).", double(tokens_active));
  gauge("prefix_cache_entries", "Blocks held by the prefix cache.", double(prefix_entries));
  counter("prefix_cache_lookup_tokens_total", "Prompt tokens looked up in the prefix cache.", uint64_t(prefix_lookup_tokens));
  counter("prefix_cache_hit_tokens_total", "Prompt tokens found in the prefix cache (not recomputed).", uint64_t(prefix_hit_tokens));
  gauge("prefix_cache_hit_rate", "Hit tokens / looked-up tokens.",
        prefix_lookup_tokens > 0 ? double(prefix_hit_tokens) / double(prefix_lookup_tokens) : 0.0);
  o << ttft.render("lmfuse_time_to_first_token_seconds", "Time from a request's arrival to its first token.");
  o << token_latency.render("lmfuse_inter_token_latency_seconds", "Time between two tokens of a request.");
  o << batch.render("lmfuse_step_batch_size", "Sequences per batch step.");
  return o.str();
}

}  // namespace lmf::server
