// Continuous batching: the server's one engine thread. Requests wait in a bounded FIFO queue and
// are admitted between steps as sequences of the engine (runtime/engine.h); every step advances
// each active request by one token (decode rows) and feeds waiting prompts in chunks under a
// token budget so the decode rows keep flowing; finished and cancelled requests leave at once and
// their blocks go back (their whole blocks into the prefix cache). A request's tokens come back
// to its HTTP thread as events through its own queue.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/engine.h"
#include "sampling/sampler.h"
#include "server/metrics.h"
#include "server/prefix_cache.h"
#include "tokenizer/tokenizer.h"

namespace lmf::server {

struct GenParams {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 0;          // > 0
  SamplingParams sampling;
  std::vector<std::string> stop;   // never emitted; the text ends before the first one
  int top_logprobs = -1;           // -1: no logprobs; 0..20: each token's logprob and that many alternatives
  bool ignore_eos = false;         // generate max_tokens (benchmarks)
};

struct TokenLogprob {
  int32_t id = -1;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // best first
};

struct Event {
  enum Kind { Text, Done, Error } kind = Text;
  std::string text;                  // Text: new text (may be empty when held back for a stop string)
  std::vector<TokenLogprob> logprobs;  // Text: the tokens this event covers
  std::string finish_reason;         // Done: "stop" or "length"
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;  // Done
  std::string error;                 // Error: one line
  int status = 500;                  // Error: HTTP status (400: the request's own fault)
};

// One request as the HTTP thread and the engine thread share it.
class Request {
 public:
  explicit Request(GenParams p) : params(std::move(p)), arrived(std::chrono::steady_clock::now()) {}
  const GenParams params;
  const std::chrono::steady_clock::time_point arrived;
  std::atomic<bool> cancelled{false};  // the client went away: the engine drops it within a step

  void push(Event e);
  // The next event; nullopt after `timeout` without one.
  std::optional<Event> pop(std::chrono::milliseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
};

// Why submit() refused a request: the HTTP status, one line, and the OpenAI-style error code.
struct Refusal {
  int status = 0;     // 400: the request's fault; 429: the queue is full; 503: draining or shutting down
  std::string why;
  std::string code;   // "queue_full", "draining", "shutting_down"; empty for a 400
};

// What a router needs to pick a replica (GET /load, /health/ready, the x-lmfuse-* headers). The
// queue is read live; the rest is the engine thread's view after its last step.
struct LoadSnapshot {
  int64_t queue = 0, max_queue = 0;       // waiting requests
  int64_t active = 0, max_active = 0;     // sequences in the running batch
  int64_t kv_total = 0;                   // KV blocks in the pool
  int64_t kv_used = 0;                    // held by sequences or the prefix cache
  int64_t kv_free = 0;                    // free + held only by the prefix cache (given back on demand)
  int64_t block_size = 0;                 // positions per block
  int64_t tokens_active = 0;              // positions the active sequences hold or are about to
  int64_t tokens_queued = 0;              // prompt tokens of the waiting requests
  bool draining = false, stopping = false;
};

struct SchedulerConfig {
  int64_t max_active = 16;       // sequences in the running batch (-np)
  int64_t max_queue = 64;        // waiting requests; one more is refused (429)
  int64_t prefill_budget = 256;  // prompt tokens per step, over all admitted prompts
};

class Scheduler {
 public:
  Scheduler(Engine& e, const Tokenizer& t, const SchedulerConfig& c, Metrics& m);
  ~Scheduler();  // stops the thread; requests still running get an Error event
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. Null when it is refused, with *why set: 429 when the queue is full, 400
  // when its prompt cannot fit the context, 503 while draining or shutting down.
  std::shared_ptr<Request> submit(GenParams p, Refusal* why);
  // Draining (POST /admin/drain): new requests get 503, queued and running ones go on; false
  // admits again. The server stays up either way.
  void set_draining(bool on);
  bool draining() const { return draining_; }
  LoadSnapshot load();
  const SchedulerConfig& config() const { return cfg_; }
  // Stops admitting (new requests get 503), lets running and queued requests finish for up to
  // `drain` and ends what is left with an Error event ("the server is shutting down").
  void stop(std::chrono::milliseconds drain = std::chrono::milliseconds(0));
  int64_t n_ctx() const { return engine_.n_ctx(); }

 private:
  struct Active {
    std::shared_ptr<Request> req;
    int32_t seq = -1;
    std::vector<int32_t> tokens;   // what the sequence holds + the pending input
    int64_t fed = 0;               // tokens of `tokens` in the cache
    int64_t cached = 0;            // prompt tokens taken from the prefix cache
    int64_t generated = 0;
    std::unique_ptr<Sampler> sampler;
    std::unique_ptr<StreamDecoder> decoder;
    std::string held;              // text not yet sent (could start a stop string)
    std::vector<TokenLogprob> held_logprobs;
    std::chrono::steady_clock::time_point last_token;
    bool first_token = true;
    bool waiting_blocks = false;   // its last step found the KV cache full
  };
  void loop();
  void admit();
  // After a step: the next token of `a` from its logits; false when the request is done.
  // The next token from the step's logits, or (logits null: a greedy request without logprobs or
  // penalties) the id the backend picked.
  bool advance(Active& a, const float* logits, int32_t picked);
  void finish(Active& a, const char* reason);
  void fail(Active& a, const std::string& why, int status);
  void release(Active& a, bool cache_prefix);
  void update_gauges();

  Engine& engine_;
  const Tokenizer& tok_;
  SchedulerConfig cfg_;
  Metrics& metrics_;
  PrefixCache prefix_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Request>> queue_;
  bool stopping_ = false;  // no new requests
  std::atomic<bool> draining_{false};  // no new requests for now (read under mu_ by submit)
  int64_t queued_tokens_ = 0;          // prompt tokens in queue_ (under mu_)
  bool halt_ = false;      // the engine thread ends
  bool idle_ = true;       // the engine thread waits with no active request
  std::vector<Active> active_;  // engine thread only
  std::vector<float> logits_;
  std::vector<int32_t> picked_;  // the greedy rows' ids of a step (StepItem::argmax)
  std::thread thread_;
};

}  // namespace lmf::server
