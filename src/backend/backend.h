// The Backend interface. A backend sees a planned graph: prepare() is called when shapes change
// (after the memory plan exists) to choose kernels, accept or reject fusion groups and size
// scratch; run() only launches what prepare chose, so a whole step can be captured and replayed.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "graph/graph.h"
#include "model/model.h"
#include "util/knobs.h"

namespace lmf {

struct BackendOptions {
  int n_threads = 0;   // CPU threads (0 = default)
  int64_t n_ctx = 0;   // KV cache length
  Knobs knobs;
  int device = 0;      // CUDA device ordinal
};

struct StepInput {
  const int32_t* tokens = nullptr;
  int64_t n_tokens = 0;
  int64_t pos0 = 0;        // position of tokens[0]; the cache holds 0..pos0-1 already
  float* logits = nullptr; // host, [n_out, n_vocab]
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;         // "cpu", "cuda"
  virtual std::string description() const = 0;  // "CPU AVX2, 2 threads"
  // Uploads/repacks weights and allocates the KV cache for opts.n_ctx positions.
  virtual void load(const Model& m) = 0;
  // Decides fusions and kernels for this graph (flags were reset by the caller), then the
  // caller runs fix_overlaps + apply_groups. Must not depend on token values or positions.
  virtual void prepare(Graph& g) = 0;
  // Called after prepare, fix_overlaps and apply_groups: size scratch for the final plan.
  virtual void finalize(Graph& g) {}
  virtual void run(Graph& g, const StepInput& in) = 0;
  // Greedy decode helper: returns argmax of the logits of the last step without copying them
  // to the host where the backend can (CUDA); default uses the host logits.
  virtual const BackendOptions& options() const = 0;
};

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& o);
// Returns nullptr with *why set when CUDA was not built or no device is present.
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& o, std::string* why);
// "cpu", "cuda", or "auto" (CUDA when built and a GPU is present, else CPU).
std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& o);

}  // namespace lmf
