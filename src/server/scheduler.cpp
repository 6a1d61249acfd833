#include "server/scheduler.h"

#include <algorithm>
#include <cmath>

#include "util/status.h"

namespace lmf::server {

void Request::push(Event e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_one();
}

std::optional<Event> Request::pop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  Event e = std::move(events_.front());
  events_.pop_front();
  return e;
}

Scheduler::Scheduler(Engine& e, const Tokenizer& t, const SchedulerConfig& c, Metrics& m)
    : engine_(e), tok_(t), cfg_(c), metrics_(m), prefix_(e.kv()) {
  {
    std::lock_guard<std::mutex> lock(metrics_.mu);
    metrics_.kv_blocks_total = e.kv().n_blocks();
  }
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { stop(); }

std::shared_ptr<Request> Scheduler::submit(GenParams p, Refusal* why) {
  const int64_t n = int64_t(p.prompt.size());
  auto refuse = [&](std::string w, int st, const char* code = "") {
    why->why = std::move(w);
    why->status = st;
    why->code = code;
    std::lock_guard<std::mutex> lock(metrics_.mu);
    ++(st == 429                 ? metrics_.requests_rejected
       : why->code == "draining" ? metrics_.requests_draining
                                 : metrics_.requests_error);
    return nullptr;
  };
  {
    std::lock_guard<std::mutex> lock(metrics_.mu);
    ++metrics_.requests;
  }
  if (n == 0) return refuse("the prompt is empty", 400);
  if (n >= engine_.n_ctx())
    return refuse(cat("the prompt is ", n, " tokens long; the context holds ", engine_.n_ctx(),
                      " with room for at least one generated token (start the server with a larger --ctx-size)"), 400);
  for (int32_t t : p.prompt)
    if (t < 0 || t >= engine_.n_vocab()) return refuse(cat("token id ", t, " is outside the vocabulary"), 400);
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return refuse("the server is shutting down", 503, "shutting_down");
  if (draining_)
    return refuse("the server is draining (POST /admin/drain): send the request to another replica", 503, "draining");
  if (int64_t(queue_.size()) >= cfg_.max_queue)
    return refuse(cat("the server is busy: ", queue_.size(), " requests are waiting (try again later)"), 429, "queue_full");
  auto r = std::make_shared<Request>(std::move(p));
  queued_tokens_ += n;
  queue_.push_back(r);
  cv_.notify_one();
  return r;
}

void Scheduler::set_draining(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = on;
}

LoadSnapshot Scheduler::load() {
  LoadSnapshot l;
  l.max_queue = cfg_.max_queue;
  l.max_active = cfg_.max_active;
  l.block_size = engine_.kv().block_size();
  {
    std::lock_guard<std::mutex> lock(mu_);
    l.queue = int64_t(queue_.size());
    l.tokens_queued = queued_tokens_;
    l.draining = draining_;
    l.stopping = stopping_;
  }
  std::lock_guard<std::mutex> lock(metrics_.mu);
  l.active = metrics_.active;
  l.kv_total = metrics_.kv_blocks_total;
  l.kv_used = metrics_.kv_blocks_used;
  l.kv_free = l.kv_total - l.kv_used + metrics_.kv_blocks_evictable;
  l.tokens_active = metrics_.tokens_active;
  return l;
}

void Scheduler::stop(std::chrono::milliseconds drain) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  // Let what runs finish: the engine thread keeps stepping until the queue and the batch are
  // empty or the drain time is over.
  const auto until = std::chrono::steady_clock::now() + drain;
  while (std::chrono::steady_clock::now() < until) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty() && idle_) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    halt_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& a : active_) fail(a, "the server is shutting down", 503);
  active_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& r : queue_) {
    Event e;
    e.kind = Event::Error;
    e.error = "the server is shutting down";
    e.status = 503;
    r->push(std::move(e));
  }
  queue_.clear();
  queued_tokens_ = 0;
}

void Scheduler::admit() {
  std::lock_guard<std::mutex> lock(mu_);
  while (!queue_.empty() && int64_t(active_.size()) < cfg_.max_active) {
    auto r = queue_.front();
    queue_.pop_front();
    queued_tokens_ -= int64_t(r->params.prompt.size());
    if (r->cancelled) {
      std::lock_guard<std::mutex> ml(metrics_.mu);
      ++metrics_.requests_cancelled;
      continue;
    }
    Active a;
    a.req = r;
    a.tokens = r->params.prompt;
    // The longest cached prefix, in whole blocks, leaving the last prompt token to evaluate.
    const auto m = prefix_.lookup(a.tokens, int64_t(a.tokens.size()) - 1);
    a.seq = m.n_tokens > 0 ? engine_.kv().create_shared(m.blocks, m.n_tokens) : engine_.kv().create();
    a.fed = a.cached = m.n_tokens;
    a.sampler = std::make_unique<Sampler>(r->params.sampling);
    a.decoder = std::make_unique<StreamDecoder>(tok_, true);
    {
      std::lock_guard<std::mutex> ml(metrics_.mu);
      metrics_.prompt_tokens += uint64_t(a.tokens.size());
      metrics_.prefix_lookup_tokens = prefix_.lookup_tokens;
      metrics_.prefix_hit_tokens = prefix_.hit_tokens;
    }
    active_.push_back(std::move(a));
  }
}

void Scheduler::release(Active& a, bool cache_prefix) {
  if (a.seq < 0) return;
  if (cache_prefix) prefix_.insert(std::span(a.tokens).first(size_t(a.fed)), engine_.kv().blocks(a.seq));
  engine_.kv().free(a.seq);
  a.seq = -1;
}

void Scheduler::fail(Active& a, const std::string& why, int status) {
  Event e;
  e.kind = Event::Error;
  e.error = why;
  e.status = status;
  a.req->push(std::move(e));
  release(a, false);
  std::lock_guard<std::mutex> lock(metrics_.mu);
  ++metrics_.requests_error;
}

void Scheduler::finish(Active& a, const char* reason) {
  Event e;
  e.kind = Event::Done;
  e.finish_reason = reason;
  e.prompt_tokens = int64_t(a.req->params.prompt.size());
  e.completion_tokens = a.generated;
  e.cached_tokens = a.cached;
  a.req->push(std::move(e));
  release(a, true);
  std::lock_guard<std::mutex> lock(metrics_.mu);
  ++metrics_.requests_ok;
}

namespace {

// Where the first stop string starts in `s` (npos when none), and how many bytes at the end of
// `s` could still begin one (held back until the next token says).
size_t stop_at(const std::string& s, const std::vector<std::string>& stops) {
  size_t best = std::string::npos;
  for (const auto& st : stops)
    if (!st.empty()) best = std::min(best, s.find(st));
  return best;
}
size_t may_start_stop(const std::string& s, const std::vector<std::string>& stops) {
  size_t keep = 0;
  for (const auto& st : stops)
    for (size_t k = st.empty() ? 0 : std::min(st.size() - 1, s.size()); k > keep; --k)
      if (s.compare(s.size() - k, k, st, 0, k) == 0) {
        keep = k;
        break;
      }
  return keep;
}

TokenLogprob logprobs_of(const float* l, int64_t V, int32_t id, int top) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < V; ++i) mx = std::max(mx, l[i]);
  double sum = 0;
  for (int64_t i = 0; i < V; ++i) sum += std::exp(double(l[i]) - mx);
  const float lse = float(std::log(sum)) + mx;
  TokenLogprob t;
  t.id = id;
  t.logprob = l[id] - lse;
  if (top > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(V));
    for (int64_t i = 0; i < V; ++i) ids[size_t(i)] = int32_t(i);
    const size_t k = std::min<size_t>(size_t(top), ids.size());
    std::partial_sort(ids.begin(), ids.begin() + long(k), ids.end(),
                      [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    for (size_t i = 0; i < k; ++i) t.top.push_back({ids[i], l[ids[i]] - lse});
  }
  return t;
}

}  // namespace

bool Scheduler::advance(Active& a, const float* logits, int32_t picked) {
  const GenParams& p = a.req->params;
  const int64_t V = engine_.n_vocab();
  const int32_t id = logits ? a.sampler->sample(std::span(logits, size_t(V)), a.tokens) : picked;
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(metrics_.mu);
    ++metrics_.completion_tokens;
    if (a.first_token) metrics_.ttft.observe(std::chrono::duration<double>(now - a.req->arrived).count());
    else metrics_.token_latency.observe(std::chrono::duration<double>(now - a.last_token).count());
  }
  a.first_token = false;
  a.last_token = now;
  ++a.generated;
  if (p.top_logprobs >= 0) a.held_logprobs.push_back(logprobs_of(logits, V, id, p.top_logprobs));
  const bool eog = tok_.is_eog(id) && !p.ignore_eos;
  if (!eog) a.held += a.decoder->push(id);
  const bool at_length = a.generated >= p.max_tokens || int64_t(a.tokens.size()) + 1 >= engine_.n_ctx();
  if (eog || at_length) a.held += a.decoder->flush();
  Event e;
  e.logprobs = std::move(a.held_logprobs);
  a.held_logprobs.clear();
  if (const size_t s = stop_at(a.held, p.stop); s != std::string::npos) {
    e.text = a.held.substr(0, s);
    a.req->push(std::move(e));
    finish(a, "stop");
    return false;
  }
  const size_t keep = eog || at_length ? 0 : may_start_stop(a.held, p.stop);
  e.text = a.held.substr(0, a.held.size() - keep);
  a.held.erase(0, a.held.size() - keep);
  if (!e.text.empty() || !e.logprobs.empty()) a.req->push(std::move(e));
  if (eog || at_length) {
    finish(a, eog ? "stop" : "length");
    return false;
  }
  a.tokens.push_back(id);  // the next step's input
  return true;
}

void Scheduler::update_gauges() {
  std::lock_guard<std::mutex> ml(metrics_.mu);
  {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.queue_length = int64_t(queue_.size());
  }
  metrics_.active = int64_t(active_.size());
  metrics_.kv_blocks_used = engine_.kv().used_blocks();
  metrics_.kv_blocks_evictable = prefix_.evictable();
  metrics_.prefix_entries = prefix_.entries();
  int64_t tokens = 0;
  for (const Active& a : active_) tokens += int64_t(a.tokens.size());
  metrics_.tokens_active = tokens;
}

void Scheduler::loop() {
  const int64_t V = engine_.n_vocab();
  KvCache& kv = engine_.kv();
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      idle_ = active_.empty();
      cv_.wait(lock, [&] { return halt_ || !queue_.empty() || !active_.empty(); });
      if (halt_) return;
      idle_ = false;
    }
    admit();
    // Requests whose client went away leave now; their blocks go back.
    for (size_t i = 0; i < active_.size();) {
      if (active_[i].req->cancelled) {
        release(active_[i], true);
        active_.erase(active_.begin() + long(i));
        std::lock_guard<std::mutex> ml(metrics_.mu);
        ++metrics_.requests_cancelled;
      } else {
        ++i;
      }
    }
    // The step: every decode row, then prompt chunks under the budget. Blocks are checked first:
    // the prefix cache gives back its least recently used blocks, and a request that still finds
    // no room waits (preempted when nothing else can run).
    std::vector<StepItem> items;
    std::vector<size_t> who;
    int64_t budget = cfg_.prefill_budget, need = 0;
    for (int pass = 0; pass < 2; ++pass)
      for (size_t i = 0; i < active_.size(); ++i) {
        Active& a = active_[i];
        const int64_t pending = int64_t(a.tokens.size()) - a.fed;
        const bool decode = pending == 1 && a.fed > 0;
        if ((pass == 0) != decode) continue;
        const int64_t n = decode ? 1 : std::min(pending, budget);
        if (n <= 0) continue;
        const int64_t b = kv.blocks_needed(a.seq, n);
        while (need + b > kv.free_blocks() && prefix_.evict_lru()) {
        }
        a.waiting_blocks = need + b > kv.free_blocks();
        if (a.waiting_blocks) continue;
        need += b;
        if (!decode) budget -= n;
        StepItem it;
        it.seq = a.seq;
        it.tokens = std::span(a.tokens).subspan(size_t(a.fed), size_t(n));
        items.push_back(it);
        who.push_back(i);
      }
    if (items.empty()) {
      if (!active_.empty()) {
        // Nothing fits: the youngest request gives its blocks back and computes them again later
        // (its tokens so far are kept; the prefix cache may hand them back).
        Active& y = active_.back();
        if (active_.size() == 1) {
          fail(y, cat("the KV cache (", kv.n_blocks(), " blocks of ", kv.block_size(),
                      " positions) cannot hold this request: raise --kv-budget or lower max_tokens"), 400);
          active_.pop_back();
        } else {
          release(y, true);
          const auto m = prefix_.lookup(y.tokens, int64_t(y.tokens.size()) - 1);
          y.seq = m.n_tokens > 0 ? kv.create_shared(m.blocks, m.n_tokens) : kv.create();
          y.fed = m.n_tokens;
          std::rotate(active_.begin(), active_.end() - 1, active_.end());  // it waits at the front
        }
      }
      update_gauges();  // cancelled or failed requests left: the gauges say so now
      continue;
    }
    // Greedy requests without logprobs or penalties take the backend's argmax of their row (on a GPU
    // the step then brings ids, not logits, to the host); the others sample from their logits.
    logits_.resize(items.size() * size_t(V));
    picked_.assign(items.size(), -1);
    for (size_t k = 0; k < items.size(); ++k) {
      const GenParams& p = active_[who[k]].req->params;
      if (p.sampling.temperature <= 0 && !has_penalty(p.sampling) && p.top_logprobs < 0)
        items[k].argmax = &picked_[k];
      else
        items[k].logits = logits_.data() + k * size_t(V);
    }
    try {
      engine_.step(items);
    } catch (const std::exception& ex) {  // a backend failure: every request of the step ends
      for (size_t i : who) fail(active_[i], cat("internal error: ", ex.what()), 500);
    }
    {
      std::lock_guard<std::mutex> ml(metrics_.mu);
      ++metrics_.steps;
      metrics_.step_rows += items.size();
      metrics_.batch_size = int64_t(items.size());
      metrics_.batch.observe(double(items.size()));
    }
    std::vector<char> done(active_.size(), 0);
    for (size_t k = 0; k < items.size(); ++k) {
      Active& a = active_[who[k]];
      if (a.seq < 0) {
        done[who[k]] = 1;
        continue;
      }
      if (!items[k].error.empty()) {
        fail(a, items[k].error, 400);
        done[who[k]] = 1;
        continue;
      }
      a.fed += int64_t(items[k].tokens.size());
      if (a.fed == int64_t(a.tokens.size()) && !advance(a, items[k].logits, picked_[k])) done[who[k]] = 1;
    }
    for (size_t i = active_.size(); i-- > 0;)
      if (done[i]) active_.erase(active_.begin() + long(i));
    update_gauges();
  }
}

}  // namespace lmf::server
