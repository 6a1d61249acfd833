#include "runtime/tp_sim.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>

#include "model/build_graph.h"
#include "model/tp_split.h"
#include "runtime/local_communicator.h"
#include "runtime/session.h"
#include "util/status.h"

namespace lmf {

struct TpSim::Rank {
  std::unique_ptr<Model> model;
  std::unique_ptr<Backend> backend;
  std::map<std::pair<int64_t, bool>, std::unique_ptr<Graph>> graphs;  // one per (T, all_logits)
  std::vector<float> logits;  // [n_out, vocab slice]

  Graph& graph_for(int64_t T, bool all) {
    auto& slot = graphs[{T, all}];
    if (!slot) {
      slot = std::make_unique<Graph>(build_graph(*model, T, all));
      prepare_graph(*slot, *backend);
    }
    return *slot;
  }
};

TpSim::TpSim(const Model& m, int n, const BackendOptions& o, const TpOptions& split) : m_(m), n_ctx_(o.n_ctx) {
  LMF_CHECK(o.n_ctx > 0);
  if (std::string why = tp_refusal(m, n); !why.empty()) throw Error(why);
  group_ = std::make_unique<LocalGroup>(n);
  for (int r = 0; r < n; ++r) {
    auto rk = std::make_unique<Rank>();
    rk->model = tp_split(m, r, n, split);
    BackendOptions ro = o;
    ro.n_threads = o.n_threads > 0 ? o.n_threads : 1;
    ro.comm = &group_->rank(r);
    rk->backend = make_cpu_backend(ro);
    rk->backend->load(*rk->model);
    ranks_.push_back(std::move(rk));
  }
}

TpSim::~TpSim() = default;

const Model& TpSim::rank_model(int r) const { return *ranks_.at(size_t(r))->model; }
Backend& TpSim::rank_backend(int r) { return *ranks_.at(size_t(r))->backend; }

const std::vector<float>& TpSim::eval(std::span<const int32_t> tokens, bool all_logits) {
  const int64_t T = int64_t(tokens.size()), V = m_.hp.n_vocab;
  if (T == 0) LMF_FAIL("no tokens to evaluate");
  if (pos_ + T > n_ctx_)
    LMF_FAIL("context full: ", pos_, " tokens in the cache + ", T, " new exceed the context of ", n_ctx_, " tokens");
  for (int32_t t : tokens)
    if (t < 0 || t >= V) LMF_FAIL("token id ", t, " is outside the vocabulary (0..", V - 1, ")");
  const int64_t n_out = all_logits ? T : 1;
  const int n = size();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  // The rank that failed first: it records itself before it aborts the group, so the ranks
  // released from their collectives by that abort cannot claim it.
  std::atomic<int> first_failed{-1};
  auto run_rank = [&](int r) {
    try {
      Rank& rk = *ranks_[size_t(r)];
      Graph& g = rk.graph_for(T, all_logits);
      rk.logits.resize(size_t(g.t(g.logits).rows * g.t(g.logits).cols));
      StepInput in;
      in.tokens = tokens.data();
      in.n_tokens = T;
      in.pos0 = pos_;
      in.logits = rk.logits.data();
      rk.backend->run(g, in);
    } catch (...) {
      errors[size_t(r)] = std::current_exception();
      int none = -1;
      first_failed.compare_exchange_strong(none, r);
      group_->abort();  // the other ranks would wait for this one in their next all-reduce
    }
  };
  {
    std::vector<std::jthread> threads;
    for (int r = 1; r < n; ++r) threads.emplace_back(run_rank, r);
    run_rank(0);
  }  // joined
  if (const int f = first_failed.load(); f >= 0) {
    group_->clear_abort();
    std::rethrow_exception(errors[size_t(f)]);
  }
  // Gather: rank r's columns are the vocabulary rows [vocab_begin, vocab_end) of every output row.
  logits_.assign(size_t(n_out * V), 0.f);
  for (const auto& rk : ranks_) {
    const TpPlace& p = rk->model->tp;
    const int64_t w = p.vocab_end - p.vocab_begin;
    for (int64_t row = 0; row < n_out; ++row)
      std::copy_n(rk->logits.data() + row * w, w, logits_.data() + row * V + p.vocab_begin);
  }
  pos_ += T;
  return logits_;
}

}  // namespace lmf
