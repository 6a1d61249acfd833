// lmfuse bench: llama-bench-style speed table. pp<N>: one batched pass over N random tokens;
// tg<N>: N single-token decode steps of greedy generation (after an untimed prompt of --depth
// tokens). One warm-up
// run, then -r timed repetitions; t/s as mean ± sd.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <algorithm>
#include <map>
#include <random>

#include "cli_common.h"
#include "runtime/engine.h"
#include "runtime/generator.h"
#include "runtime/session.h"
#include "sampling/sampler.h"
#include "util/status.h"

namespace lmf::cli {
namespace {

struct Row {
  std::string test, knob_label;
  double mean = 0, sd = 0;
  std::vector<double> samples;
  std::string extra;    // backend-specific (bandwidth)
  std::string backend;  // the backend's description for this row (a knob may change it)
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 r(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(r() % uint64_t(vocab));
  return t;
}

void finish_row(Row& row) {
  double sum = 0, sq = 0;
  for (double x : row.samples) sum += x;
  row.mean = sum / double(row.samples.size());
  for (double x : row.samples) sq += (x - row.mean) * (x - row.mean);
  row.sd = row.samples.size() > 1 ? std::sqrt(sq / double(row.samples.size() - 1)) : 0;
}

Row bench_one(Session& s, const std::string& kind, int64_t n, int64_t depth, int reps, int64_t vocab) {
  Row row;
  row.test = kind + std::to_string(n) + (depth > 0 ? cat(" @ d", depth) : "");
  for (int r = -1; r < reps; ++r) {  // r = -1: warm-up
    s.reset();
    auto toks = random_tokens(std::max<int64_t>(n, 1) + depth, vocab, uint64_t(r + 2));
    if (depth > 0) s.eval(std::span(toks).first(size_t(depth)));
    // tg: greedy generation of n tokens from a random one (runtime/generator.h), as `lmfuse run`
    // generates: each token is picked where the logits are (on the GPU for CUDA) and is the next
    // step's input; where the backend chains steps (knob decode_pipeline) the next step is queued
    // before the host reads the token.
    SamplingParams greedy_params;
    greedy_params.temperature = 0;
    Sampler greedy(greedy_params);
    std::vector<int32_t> history(toks.begin(), toks.begin() + depth + 1);
    double t0 = now_s();
    if (kind == "pp") {
      s.eval(std::span(toks).subspan(size_t(depth), size_t(n)));
    } else {
      Generator gen(s, greedy, history, n);
      gen.first(std::span(toks).subspan(size_t(depth), 1));
      while (gen.more()) gen.next();
      gen.finish();
    }
    double dt = now_s() - t0;
    if (r >= 0) row.samples.push_back(double(n) / dt);
  }
  finish_row(row);
  return row;
}

// tg with B independent sequences decoding together (runtime/engine.h): each holds its own
// untimed prompt of depth + 1 random tokens, then n batch steps of one greedy token per sequence.
// t/s is the aggregate (B x n tokens over the time); the row's note gives it per sequence. The
// greedy ids come from the backend (StepItem::argmax), not from logits copied to the host.
Row bench_batch(lmf::Engine& eng, int64_t B, int64_t n, int64_t depth, int reps, int64_t vocab) {
  Row row;
  row.test = cat("tg", n, " b", B, depth > 0 ? cat(" @ d", depth) : "");
  const size_t V = size_t(vocab);
  std::vector<float> logits(size_t(B) * V);
  for (int r = -1; r < reps; ++r) {
    std::vector<int32_t> seqs(static_cast<size_t>(B)), next(static_cast<size_t>(B));
    std::vector<StepItem> items(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
      seqs[size_t(b)] = eng.kv().create();
      auto toks = random_tokens(depth + 1, vocab, uint64_t(1000 * (r + 2) + b));
      StepItem it;
      it.seq = seqs[size_t(b)];
      it.tokens = toks;
      it.logits = logits.data();
      eng.step({&it, 1});
      if (!it.error.empty()) LMF_FAIL(it.error);
      next[size_t(b)] = int32_t(std::max_element(logits.begin(), logits.begin() + long(V)) - logits.begin());
    }
    const double t0 = now_s();
    for (int64_t i = 0; i < n; ++i) {
      std::vector<int32_t> ids(static_cast<size_t>(B));
      for (int64_t b = 0; b < B; ++b) {
        items[size_t(b)].seq = seqs[size_t(b)];
        items[size_t(b)].tokens = std::span(&next[size_t(b)], 1);
        items[size_t(b)].argmax = ids.data() + b;
      }
      if (eng.step(items) != B)
        for (const auto& it : items)
          if (!it.error.empty()) LMF_FAIL("batch step: ", it.error);
      next = ids;
    }
    const double dt = now_s() - t0;
    for (int32_t s : seqs) eng.kv().free(s);
    if (r >= 0) row.samples.push_back(double(B * n) / dt);
  }
  finish_row(row);
  row.extra = cat(std::round(row.mean / double(B) * 100) / 100, " t/s per sequence");
  return row;
}

void print_profile(const std::vector<ProfileEntry>& p) {
  if (p.empty()) {
    std::printf("\n(--profile: this backend records no per-launch times)\n");
    return;
  }
  std::map<std::string, std::pair<double, int>> by_kind;
  double total = 0;
  for (const auto& e : p) {
    by_kind[e.kind].first += e.us;
    by_kind[e.kind].second++;
    total += e.us;
  }
  std::vector<std::pair<std::string, std::pair<double, int>>> v(by_kind.begin(), by_kind.end());
  std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.second.first > b.second.first; });
  std::printf("\none step, %zu launches, %.1f us (eager; each launch timed):\n", p.size(), total);
  std::printf("| kernel | launches | total us | mean us | share |\n| --- | ---: | ---: | ---: | ---: |\n");
  for (auto& [k, t] : v)
    std::printf("| %s | %d | %.1f | %.2f | %.1f %% |\n", k.c_str(), t.second, t.first, t.first / t.second, 100.0 * t.first / total);
}

// The replayed step's launch timeline (Backend::timeline), per kind in launch order: what each
// kind adds to the step (its end after the previous kernel's end), its PDL release after that
// end, and how long its blocks were resident before it.
void print_timeline(const std::vector<ProfileEntry>& t) {
  if (t.empty()) return;
  struct Row {
    std::string kind;
    double adds = 0, released = 0, early = 0, last_start = 0, phase = 0;
    int n = 0;
  };
  std::vector<Row> rows;
  double total = 0;
  for (const auto& e : t) {
    auto it = std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return r.kind == e.kind; });
    if (it == rows.end()) it = rows.insert(rows.end(), Row{e.kind});
    it->adds += e.us;
    it->released += e.released_us;
    it->early += e.early_us;
    it->last_start += e.last_start_us;
    it->phase += e.phase_us;
    it->n++;
    total += e.us;
  }
  std::printf("\nthe same step replayed as a CUDA graph, %zu stamped kernels, %.1f us from the first start to the "
              "last end (launch timeline, mean of 5 replays):\n", t.size(), total);
  std::printf("| kernel | launches | adds to the step, total us | mean us | released after prev end, mean us | "
              "resident before prev end, mean us | last block start after prev end, mean us | first phase done "
              "(last block) after prev end, mean us | share |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
              "---: |\n");
  for (const auto& r : rows)
    std::printf("| %s | %d | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f %% |\n", r.kind.c_str(), r.n, r.adds,
                r.adds / r.n, r.released / r.n, r.early / r.n, r.last_start / r.n, r.phase / r.n,
                100.0 * r.adds / total);
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  CLI::App app{"Measure prompt processing (pp) and generation (tg) speed, llama-bench style.\n\n"
               "examples:\n"
               "  lmfuse bench -m qwen3-0.6b-q4_0.gguf -p 512 -n 128 -t 2\n"
               "  lmfuse bench -m q.gguf -p 0 -n 128 -d 4096        # decode after a 4096-token prompt\n"
               "  lmfuse bench -m q.gguf -p 0 -n 128 -b 1,4,8       # 1, 4 and 8 sequences decoding together\n"
               "  lmfuse bench -m q.gguf --ab qkv_fusion            # knob at 0 and 1, with the ratio\n"
               "  lmfuse bench -m q.gguf --knob ln_fusion=0 --json",
               "lmfuse bench"};
  EngineFlags ef;
  add_engine_flags(app, ef);
  std::vector<int64_t> pp{512}, tg{128};
  int64_t depth = 0;
  int reps = 5;
  bool json = false;
  std::string ab;
  app.add_option("-p,--n-prompt", pp, "prompt lengths to test (0 = none)")->delimiter(',')->check(at_least(0));
  app.add_option("-n,--n-gen", tg, "generation lengths to test (0 = none)")->delimiter(',')->check(at_least(0));
  app.add_option("-d,--depth", depth, "tokens already in the KV cache before each test")->check(at_least(0));
  std::vector<int64_t> batch{1};
  app.add_option("-b,--batch", batch,
                 "sequences decoding together in the tg tests (aggregate t/s; needs a paged-KV backend past 1)")
      ->delimiter(',')
      ->check(in_range(1, 1024));
  app.add_option("-r,--repetitions", reps, "timed repetitions (after one warm-up)")->check(in_range(1, 1000));
  app.add_flag("--json", json, "print JSON lines instead of a table");
  app.add_option("--ab", ab, "run every test with KNOB=0 and KNOB=1 and print the ratio");
  bool profile = false;
  app.add_flag("--profile", profile,
               "per-kernel time breakdown of one decode step: each launch timed alone, then (CUDA) the step's "
               "launch timeline as its graph replays it");
  CLI11_PARSE(app, argc, argv);
  if (std::all_of(pp.begin(), pp.end(), [](int64_t p) { return p == 0; }) &&
      std::all_of(tg.begin(), tg.end(), [](int64_t n) { return n == 0; }) && !profile)
    LMF_FAIL("nothing to measure: every -p and -n is 0");

  double copy_bw = 0, gemm_peak = 0;
  std::vector<std::string> variants = {""};
  if (!ab.empty()) {
    Knobs().get(ab);  // validates the knob name
    variants = {ab + "=0", ab + "=1"};
  }
  int64_t max_len = depth;
  for (auto p : pp) max_len = std::max(max_len, depth + p);
  for (auto n : tg) max_len = std::max(max_len, depth + n + 1);  // -b: a prompt of depth + 1, then n steps
  if (profile) max_len = std::max<int64_t>(max_len, depth + 2);  // the profiled step follows depth + 1 tokens

  std::vector<Row> rows;
  std::string model_desc, size_desc, params_desc, backend_desc;
  int threads = 0;
  for (const auto& v : variants) {
    EngineFlags f = ef;
    if (!v.empty()) f.knobs.push_back(v);
    f.n_ctx = std::max<int64_t>(f.n_ctx, max_len);
    Loaded e = load_engine(f, max_len);
    // A paged-KV backend gets one engine whose pool holds the largest batch; the B = 1 tests run a
    // session of it, or of the backend's own cache where it keeps one (CUDA: its replayed
    // single-sequence step). Others keep their own cache (B = 1 only).
    const int64_t max_b = *std::max_element(batch.begin(), batch.end());
    std::unique_ptr<lmf::Engine> eng;
    std::unique_ptr<Session> sp;
    if (e.backend->paged_kv()) {
      EngineConfig c;
      c.n_ctx = f.n_ctx;
      c.kv_positions = max_b * ((max_len + c.block_size) / c.block_size * c.block_size);  // whole blocks each
      eng = std::make_unique<lmf::Engine>(*e.model, *e.backend, c);
      if (e.backend->own_kv()) sp = std::make_unique<Session>(*e.model, *e.backend);
      else sp = std::make_unique<Session>(*eng);
    } else {
      if (max_b > 1) LMF_FAIL("-b ", max_b, ": batched decode needs a paged-KV backend; ", e.backend->name(), " runs one sequence");
      sp = std::make_unique<Session>(*e.model, *e.backend);
    }
    Session& s = *sp;
    const auto& hp = e.model->hp;
    double params_b = double(e.model->param_count());
    model_desc = cat(hp.arch_name, " ", params_b >= 1e9 ? cat(std::round(params_b / 1e8) / 10, "B")
                                                       : cat(std::round(params_b / 1e6), "M"),
                     " ", e.model->type_summary());
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2f MiB", double(e.model->weight_bytes()) / (1 << 20));
    size_desc = buf;
    std::snprintf(buf, sizeof buf, "%.2f M", params_b / 1e6);
    params_desc = buf;
    backend_desc = e.backend->description();
    threads = e.backend->options().n_threads;
    if (gemm_peak == 0 && std::any_of(pp.begin(), pp.end(), [](int64_t p) { return p > 0; }))
      gemm_peak = e.backend->gemm_peak_flops();
    for (auto p : pp)
      if (p > 0) {
        rows.push_back(bench_one(s, "pp", p, depth, reps, hp.n_vocab));
        rows.back().knob_label = v;
        rows.back().backend = backend_desc;
        if (gemm_peak > 0) {
          // Model FLOPs of the run: 2 x (layer matrices) per token, the output head once (last
          // token), causal attention QK^T and PV (4 x heads x head_dim per visible key).
          const double d = double(hp.n_embd), layer_mat = d * double(hp.q_dim() + 2 * hp.kv_dim()) +
                                                          double(hp.q_dim()) * d + 3.0 * d * double(hp.n_ff);
          const double keys = double(p) * double(depth) + double(p) * double(p + 1) / 2.0;
          const double flop = 2.0 * double(hp.n_layer) * layer_mat * double(p) + 2.0 * double(hp.n_vocab) * d +
                              4.0 * double(hp.n_layer) * double(hp.n_head) * double(hp.head_dim) * keys;
          const double fs = flop / (double(p) / rows.back().mean);
          char b[112];
          std::snprintf(b, sizeof b, "%.1f TFLOP/s = %.1f %% of bf16 GEMM %.0f TFLOP/s", fs / 1e12, 100.0 * fs / gemm_peak,
                        gemm_peak / 1e12);
          rows.back().extra = b;
        }
      }
    if (copy_bw == 0) copy_bw = e.backend->copy_bandwidth();
    for (auto n : tg)
      for (int64_t B : batch)
        if (n > 0 && B > 1) {
          rows.push_back(bench_batch(*eng, B, n, depth, reps, hp.n_vocab));
          rows.back().knob_label = v;
          rows.back().backend = backend_desc;
        }
    for (auto n : tg)
      if (n > 0 && std::find(batch.begin(), batch.end(), 1) != batch.end()) {
        rows.push_back(bench_one(s, "tg", n, depth, reps, hp.n_vocab));
        rows.back().knob_label = v;
        rows.back().backend = backend_desc;
        const uint64_t wb = e.backend->decode_weight_bytes();
        if (wb > 0 && copy_bw > 0) {
          // bytes per token: weights + the KV cache read at the mean context of the run
          const double ctx = double(depth) + double(n + 1) / 2.0;
          const double kv = double(hp.kv_cache_bytes(1)) * ctx;
          const double bw = (double(wb) + kv) * rows.back().mean;
          char b[96];
          std::snprintf(b, sizeof b, "%.0f GB/s = %.1f %% of %s %.0f GB/s", bw / 1e9, 100.0 * bw / copy_bw,
                        e.backend->bandwidth_kind(), copy_bw / 1e9);
          rows.back().extra = b;
        }
      }
    if (profile && !pp.empty() && pp[0] > 0) {
      s.reset();
      auto toks = random_tokens(pp[0], hp.n_vocab, 98);
      s.profile_next();
      s.eval(toks);
      std::printf("\nprefill of %lld tokens:", (long long)pp[0]);
      print_profile(e.backend->profile());
    }
    if (profile) {
      s.reset();
      auto toks = random_tokens(depth + 2, hp.n_vocab, 99);
      s.eval(std::span(toks).first(size_t(depth + 1)));
      s.profile_next();
      s.eval_argmax(std::span(toks).subspan(size_t(depth + 1), 1));
      print_profile(e.backend->profile());
      print_timeline(e.backend->timeline());
    }
  }
  if (json) {
    for (const auto& r : rows)
      std::printf("{\"model\":\"%s\",\"size\":\"%s\",\"backend\":\"%s\",\"threads\":%d,\"test\":\"%s\",\"knob\":\"%s\","
                  "\"ts_mean\":%.3f,\"ts_sd\":%.3f,\"bandwidth\":\"%s\"}\n",
                  model_desc.c_str(), size_desc.c_str(), r.backend.c_str(), threads, r.test.c_str(),
                  r.knob_label.c_str(), r.mean, r.sd, r.extra.c_str());
    return 0;
  }
  const bool show_knob = !ab.empty() || !ef.knobs.empty();
  bool any_extra = false;
  for (const auto& r : rows) any_extra |= !r.extra.empty();
  std::printf("| model | size | params | backend | threads |%s test | t/s |%s\n", show_knob ? " knobs |" : "",
              any_extra ? " bandwidth (tg) / compute (pp) |" : "");
  std::printf("| --- | ---: | ---: | --- | ---: |%s ---: | ---: |%s\n", show_knob ? " --- |" : "", any_extra ? " ---: |" : "");
  for (const auto& r : rows) {
    std::string knob = r.knob_label;
    for (const auto& k : ef.knobs) knob += (knob.empty() ? "" : " ") + k;
    std::printf("| %s | %s | %s | %s | %d |%s %s | %.2f ± %.2f |%s\n", model_desc.c_str(), size_desc.c_str(),
                params_desc.c_str(), r.backend.c_str(), threads, show_knob ? (" " + knob + " |").c_str() : "",
                r.test.c_str(), r.mean, r.sd, any_extra ? (" " + r.extra + " |").c_str() : "");
  }
  if (!ab.empty()) {
    const size_t half = rows.size() / 2;
    for (size_t i = 0; i < half; ++i)
      std::printf("%s: %s=1 / %s=0 = %.3f\n", rows[i].test.c_str(), ab.c_str(), ab.c_str(),
                  rows[i + half].mean / rows[i].mean);
  }
  return 0;
}

}  // namespace lmf::cli
