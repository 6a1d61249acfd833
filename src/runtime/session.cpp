#include "runtime/session.h"

#include <algorithm>

#include "model/build_graph.h"
#include "runtime/engine.h"
#include "sampling/sampler.h"
#include "util/status.h"

namespace lmf {

// Plain greedy: the argmax step (no random number, no penalty).
static bool greedy(const SamplingParams& p) { return p.temperature <= 0 && !has_penalty(p); }

// A chained step's request (no penalty: Session::can_chain): its id picked where the logits are,
// by argmax when greedy, else by device sampling with the sampler's next uniform, and left on
// the device as the next step's input.
static StepInput chained_pick(Sampler& sampler, int32_t* id) {
  const SamplingParams& p = sampler.params();
  StepInput in;
  if (greedy(p)) {
    in.argmax = id;
  } else {
    in.sample = &p;
    in.sample_u01 = p.temperature > 0 ? sampler.next_uniform() : 0.0;
    in.sampled = id;
  }
  in.chain_next = true;
  return in;
}

void prepare_graph(Graph& g, Backend& b, size_t max_rehome_bytes) {
  g.reset_fusion();
  b.prepare(g);
  fix_overlaps(g, max_rehome_bytes);
  apply_groups(g);
  b.finalize(g);
}

Session::Session(const Model& m, Backend& b) : model_(m), backend_(b), n_ctx_(b.options().n_ctx) {
  LMF_CHECK(n_ctx_ > 0);
  if (!b.own_kv()) {
    EngineConfig c;
    c.n_ctx = n_ctx_;
    own_engine_ = std::make_unique<Engine>(m, b, c);
    engine_ = own_engine_.get();
    seq_ = engine_->kv().create();
  }
}

Session::Session(Engine& e) : model_(e.model()), backend_(e.backend()), n_ctx_(e.n_ctx()), engine_(&e) {
  seq_ = e.kv().create();
}

Session::~Session() {
  if (engine_ && engine_->kv().exists(seq_)) engine_->kv().free(seq_);
}

std::unique_ptr<Session> Session::fork() const {
  if (!engine_) LMF_FAIL("fork needs a backend with a paged KV cache; ", backend_.name(), " keeps its own");
  std::unique_ptr<Session> s(new Session(*engine_));
  engine_->kv().free(s->seq_);
  s->seq_ = engine_->kv().fork(seq_);
  s->pos_ = pos_;
  return s;
}

void Session::paged_chunk(std::span<const int32_t> tokens, bool all_logits, float* out, bool profile) {
  StepItem it;
  it.seq = seq_;
  it.tokens = tokens;
  it.all_logits = all_logits;
  it.logits = out;
  engine_->step({&it, 1}, profile);
  if (!it.error.empty()) throw Error(it.error);
}

Graph& Session::graph_for(int64_t n, bool all) {
  if (engine_) return engine_->graph_for(n, all ? n : 1);
  auto& slot = graphs_[{n, all}];
  if (!slot) {
    slot = std::make_unique<Graph>(build_graph(model_, n, all));
    prepare_graph(*slot, backend_);
  }
  return *slot;
}

void Session::rewind(int64_t p) {
  LMF_CHECK(p >= 0 && p <= pos_);
  pos_ = p;
  if (engine_) engine_->kv().truncate(seq_, p);
}

const std::vector<float>& Session::eval(std::span<const int32_t> tokens, bool all_logits) {
  eval_impl(tokens, all_logits);
  return logits_;
}

int32_t Session::eval_argmax(std::span<const int32_t> tokens) {
  if (engine_) {  // paged (CPU): the logits are on the host already
    const auto& l = eval(tokens);
    return int32_t(std::max_element(l.begin(), l.end()) - l.begin());
  }
  int32_t id = -1;
  StepInput req;
  req.argmax = &id;
  eval_impl(tokens, false, &req);
  return id;
}

int32_t Session::eval_sample(std::span<const int32_t> tokens, const SamplingParams& p, std::span<const int32_t> history,
                             double u01) {
  const int64_t V = model_.hp.n_vocab;
  const std::vector<int32_t> pen = penalty_ids(p, history, V);
  if (!backend_.can_sample(p, V)) return sample_with_uniform(p, eval(tokens), pen, u01);
  int32_t id = -1;
  StepInput req;
  req.sample = &p;
  req.penalty_ids = pen.data();
  req.n_penalty_ids = int64_t(pen.size());
  req.sample_u01 = u01;
  req.sampled = &id;
  eval_impl(tokens, false, &req);
  return id;
}

int32_t Session::eval_next(std::span<const int32_t> tokens, Sampler& sampler, std::span<const int32_t> history) {
  const SamplingParams& p = sampler.params();
  if (greedy(p)) return eval_argmax(tokens);
  return eval_sample(tokens, p, history, p.temperature > 0 ? sampler.next_uniform() : 0.0);
}

bool Session::can_chain(const SamplingParams& p) const {
  return tri_resolve(backend_.options().knobs.decode_pipeline, true) && backend_.can_chain(p, model_.hp.n_vocab);
}

int32_t Session::eval_next_chained(std::span<const int32_t> tokens, Sampler& sampler) {
  if (!can_chain(sampler.params()))
    LMF_FAIL("chained decode is not available for these sampling parameters on ", backend_.name());
  int32_t id = -1;
  const StepInput req = chained_pick(sampler, &id);
  eval_impl(tokens, false, &req);
  return id;
}

void Session::queue_next(Sampler& sampler) {
  if (!can_chain(sampler.params()))
    LMF_FAIL("chained decode is not available for these sampling parameters on ", backend_.name());
  if (pos_ + 1 > n_ctx_)
    LMF_FAIL("context full: ", pos_, " tokens in the cache + 1 new exceed the context of ", n_ctx_, " tokens");
  Graph& g = graph_for(1, false);
  int32_t unused = -1;  // selects the kind of step; a queued step writes its id for take_queued
  StepInput in = chained_pick(sampler, &unused);
  in.n_tokens = 1;
  in.pos0 = pos_;
  in.token_on_device = true;
  in.queue = true;
  backend_.run(g, in);
  pos_ += 1;
}

void Session::eval_impl(std::span<const int32_t> tokens, bool all_logits, const StepInput* pick) {
  const int64_t T = int64_t(tokens.size());
  if (T == 0) LMF_FAIL("no tokens to evaluate");
  if (pos_ + T > n_ctx_)
    LMF_FAIL(pos_ == 0 ? cat("prompt is ", T, " tokens long; the context holds ", n_ctx_, " (use a larger -c)")
                       : cat("context full: ", pos_, " tokens in the cache + ", T, " new exceed the context of ",
                             n_ctx_, " tokens"));
  for (int32_t t : tokens)
    if (t < 0 || t >= model_.hp.n_vocab)
      LMF_FAIL("token id ", t, " is outside the vocabulary (0..", model_.hp.n_vocab - 1, ")");
  const int64_t V = model_.hp.n_vocab;
  if (!pick) logits_.resize(size_t((all_logits ? T : 1) * V));
  if (engine_) {  // paged: the engine's steps, chunked as below (pick requests take the logits path)
    LMF_CHECK(!pick);
    for (int64_t done = 0; done < T;) {
      const int64_t n = std::min({max_batch_, backend_.max_tokens_per_run(), T - done});
      const bool last = done + n == T;
      float* out = all_logits ? logits_.data() + done * V : last ? logits_.data() : nullptr;
      paged_chunk(tokens.subspan(size_t(done), size_t(n)), all_logits, out, profile_next_ && last);
      if (profile_next_ && last) profile_next_ = false;
      pos_ += n;
      done += n;
    }
    return;
  }
  for (int64_t done = 0; done < T;) {
    const int64_t n = std::min({max_batch_, backend_.max_tokens_per_run(), T - done});
    const bool last = done + n == T;
    Graph& g = graph_for(n, all_logits);
    // The last chunk of a pick request carries it (the picked id instead of the logits).
    StepInput in = last && pick && !all_logits ? *pick : StepInput{};
    in.tokens = tokens.data() + done;
    in.n_tokens = n;
    in.pos0 = pos_;
    in.profile = profile_next_ && last;
    // Non-last chunks of a last-logits request produce no output (nothing is copied back).
    if (all_logits) {
      in.logits = logits_.data() + done * V;
    } else if (last && !pick) {
      in.logits = logits_.data();
    }
    backend_.run(g, in);
    if (in.profile) profile_next_ = false;
    pos_ += n;
    done += n;
  }
}

}  // namespace lmf
