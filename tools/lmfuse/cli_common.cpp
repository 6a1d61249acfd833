#include "cli_common.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>

#include "tokenizer/utf8.h"
#include "util/log.h"
#include "util/mmap.h"
#include "util/progress.h"
#include "util/status.h"
#include "util/threadpool.h"

namespace lmf::cli {

void add_engine_flags(CLI::App& app, EngineFlags& f, bool model_required) {
  auto* m = app.add_option("-m,--model", f.model, "GGUF model file");
  if (model_required) m->required();
  add_threads_flag(app, f.threads);
  app.add_option("-c,--ctx-size", f.n_ctx, "context length (default: min(model's, 4096))");
  app.add_option("--device", f.device, "cpu, cuda or auto (default auto: CUDA when present)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  app.add_option("--ngl,--n-gpu-layers", f.ngl, "-ngl / --ngl: 0 runs on the CPU; any other value on the GPU");
  app.add_option("--mg,--main-gpu", f.main_gpu, "-mg / --mg: the CUDA device to run on (default 0; implies --device cuda)")
      ->check(at_least(0));
  app.add_option("--knob", f.knobs, "set a tri-state knob, e.g. --knob qkv_fusion=0 (repeatable)");
}

Knobs knobs_from(const EngineFlags& f) {
  Knobs k = Knobs::from_env();
  for (const auto& kv : f.knobs) {
    auto eq = kv.find('=');
    if (eq == std::string::npos) LMF_FAIL("--knob expects NAME=0|1|auto, got '", kv, "'");
    k.set(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return k;
}

Loaded load_engine(const EngineFlags& f, int64_t min_ctx) {
  LoadRequest r;
  r.path = f.model;
  r.threads = f.threads;
  r.n_ctx = f.n_ctx;
  r.min_ctx = min_ctx;
  r.knobs = knobs_from(f);
  r.progress = true;
  r.device = f.device;
  if (f.ngl == 0) r.device = "cpu";
  else if (f.ngl > 0 && r.device == "auto") r.device = "cuda";
  if (f.main_gpu >= 0) {
    if (r.device == "cpu") LMF_FAIL("--main-gpu picks a CUDA device; it cannot be combined with --device cpu or -ngl 0");
    r.device = "cuda";  // an explicit GPU never falls back to the CPU
    r.device_index = f.main_gpu;
  }
  return load(r);
}

void add_seed_flag(CLI::App& app, int64_t& seed) {
  app.add_option("--seed", seed, "random seed (default 0; -1: a random one, printed)")->check(at_least(-1));
}

uint64_t resolve_seed(int64_t seed) {
  if (seed >= 0) return uint64_t(seed);
  std::random_device rd;
  const uint64_t s = (uint64_t(rd()) << 32 | rd()) >> 1;  // fits --seed, to repeat the run
  std::fprintf(stderr, "seed: %llu\n", (unsigned long long)s);
  return s;
}

std::string read_text_file(const std::string& path) {
  return read_file(path == "-" ? "/dev/stdin" : path);  // its errors name the path
}

CLI::Validator in_range(int64_t min, int64_t max) {
  const bool open = max == std::numeric_limits<int64_t>::max();
  return CLI::Validator(
      [min, max, open](std::string& v) {
        int64_t x = 0;
        const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
        if (ec != std::errc() || end != v.data() + v.size() || (x >= min && x <= max)) return std::string();
        return open ? cat("must be >= ", min, ", got ", v) : cat("must be ", min, " to ", max, ", got ", v);
      },
      open ? cat("N>=", min) : cat("N in ", min, "..", max));
}

CLI::Validator at_least(int64_t min) { return in_range(min, std::numeric_limits<int64_t>::max()); }

void add_threads_flag(CLI::App& app, int& threads) {
  app.add_option("-t,--threads", threads, cat("CPU threads (default 0: all ", ThreadPool::default_threads(), " cores)"))
      ->check(in_range(0, ThreadPool::kMaxThreads));
}

void require_utf8(const std::string& text, const char* what) {
  if (auto e = utf8::invalid_message(text, what); !e.empty()) LMF_FAIL(e);
}

std::vector<int32_t> parse_token_list(const std::string& s, const char* what) {
  // Ids separated by commas and/or whitespace, optionally in brackets: "1,2,3", "1 2 3" and a
  // pasted Python list "[1, 2, 3]" all read the same.
  std::string_view rest(s);
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  auto trim = [&](std::string_view v) {
    while (!v.empty() && is_space(v.front())) v.remove_prefix(1);
    while (!v.empty() && is_space(v.back())) v.remove_suffix(1);
    return v;
  };
  rest = trim(rest);
  if (rest.size() >= 2 && rest.front() == '[' && rest.back() == ']') rest = trim(rest.substr(1, rest.size() - 2));
  std::vector<int32_t> out;
  while (!rest.empty()) {
    size_t j = 0;
    while (j < rest.size() && rest[j] != ',' && !is_space(rest[j])) ++j;
    const std::string_view tok = rest.substr(0, j);
    int32_t v = 0;
    auto [p, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    if (tok.empty() || ec != std::errc() || p != tok.data() + tok.size())
      LMF_FAIL(what, ": expected integers separated by commas or spaces, got '", tok, "'");
    out.push_back(v);
    rest = trim(rest.substr(j));
    if (!rest.empty() && rest.front() == ',') {
      rest = trim(rest.substr(1));
      if (rest.empty()) LMF_FAIL(what, ": a comma with no id after it");
    }
  }
  if (out.empty()) LMF_FAIL(what, ": no token ids given");
  return out;
}

}  // namespace lmf::cli
