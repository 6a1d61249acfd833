#include "runtime/load.h"

#include <algorithm>

#include "format/gguf/gguf.h"
#include "util/log.h"
#include "util/progress.h"
#include "util/status.h"
#include "util/threadpool.h"

namespace lmf {

Loaded load(const LoadRequest& r) {
  if (r.n_ctx < 0) LMF_FAIL("-c/--ctx-size must be positive, got ", r.n_ctx);
  Loaded e;
  e.model = Model::load(r.path);
  BackendOptions o;
  o.n_threads = r.threads > 0 ? r.threads : ThreadPool::default_threads();
  // An explicit context is honoured (a longer input is then a clear error); the default grows to
  // what the caller needs.
  o.n_ctx = r.n_ctx > 0 ? r.n_ctx : std::max(std::min<int64_t>(e.model->hp.n_ctx_train, 4096), r.min_ctx);
  if (r.n_ctx > 0 && e.model->hp.n_ctx_train > 0 && r.n_ctx > e.model->hp.n_ctx_train)  // as llama.cpp warns
    LMF_LOG(Warn, "-c ", r.n_ctx, " is longer than the model's training context (", e.model->hp.n_ctx_train,
            "): positions past it may give poor text");
  o.knobs = r.knobs;
  o.device = r.device_index;
  // Backends that copy the weights (CUDA) report each layer: a bar on a terminal, a line every
  // few seconds otherwise, nothing for a load too short to draw one.
  std::shared_ptr<Progress> prog;
  if (r.progress) {
    prog = std::make_shared<Progress>("loading " + r.path, e.model->weight_bytes());
    o.load_progress = [prog](uint64_t done, uint64_t, int64_t k, int64_t n) { prog->update(done, k, n); };
  }
  std::string device = r.device;
#ifdef LMFUSE_HAVE_CUDA
  if (device != "cpu") {
    // The first tensor whose type the CUDA backend cannot run: `auto` takes the CPU instead, `cuda`
    // is an error naming it.
    const gguf::TensorInfo* odd = nullptr;
    for (const auto& t : e.model->file->tensors())
      if (!cuda_weight_supported(t.type)) {
        odd = &t;
        break;
      }
    if (odd && device == "cuda")
      LMF_FAIL(r.path, ": tensor '", odd->name, "': unsupported weight type ", dtype_name(odd->type),
               " on CUDA (it runs f32, f16, bf16, q4_0, q4_1, q5_0, q8_0, iq4_nl, q3_K, q4_K, q5_K, q6_K so far); use --device cpu");
    if (odd) {
      LMF_LOG(Info, "running on the CPU: tensor '", odd->name, "' is ", dtype_name(odd->type),
              ", which the CUDA backend does not run yet");
      device = "cpu";
    }
  }
#endif
  e.backend = make_backend(device, o);
  e.backend->load(*e.model);
  if (prog) prog->finish(false);
  return e;
}

int64_t kv_positions_for_budget(const Model& m, const Backend& b, uint64_t budget, int64_t n_ctx, int64_t n_seqs) {
  const uint64_t per_pos = m.hp.kv_cache_bytes(1);
  if (budget > 0) {
    const int64_t p = int64_t(budget / per_pos);
    if (p < n_ctx)
      LMF_FAIL("--kv-budget ", (budget >> 20), " MiB holds ", p, " positions, less than one context of ", n_ctx,
               " (", (per_pos * uint64_t(n_ctx)) >> 20, " MiB): raise it or lower -c");
    return p;
  }
  int64_t p = n_seqs * n_ctx;
  if (const uint64_t avail = b.kv_memory_available(); avail > 0)
    p = std::min<int64_t>(p, int64_t(avail / 2 / per_pos));
  return std::max(p, n_ctx);
}

}  // namespace lmf
