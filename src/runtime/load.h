// One setup path for the CLI and the public API: a GGUF model loaded on a backend, with the
// backend options (threads, context, knobs, device) resolved in one place.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "model/model.h"
#include "util/knobs.h"

namespace lmf {

struct LoadRequest {
  std::string path;
  std::string device = "auto";  // cpu, cuda, auto
  int device_index = 0;         // CUDA device ordinal
  int threads = 0;              // 0 = every core
  int64_t n_ctx = 0;            // positions one sequence may hold; 0 = max(min(model's, 4096), min_ctx)
  int64_t min_ctx = 0;          // what the caller needs at least when n_ctx is 0
  Knobs knobs;
  bool progress = false;        // a load bar / progress lines for backends that copy the weights
};

struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<Backend> backend;
};

Loaded load(const LoadRequest& r);

// KV pool positions for a memory budget in bytes (0 = automatic: room for n_seqs sequences of the
// full context, within half of the memory the backend says is free, and never less than one
// context).
int64_t kv_positions_for_budget(const Model& m, const Backend& b, uint64_t budget_bytes, int64_t n_ctx,
                                int64_t n_seqs = 4);

}  // namespace lmf
