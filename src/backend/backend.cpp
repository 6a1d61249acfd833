#include "backend/backend.h"

#include "util/status.h"

namespace lmf {

#ifndef LMFUSE_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions&, std::string* why) {
  if (why) *why = "lmfuse was built without CUDA (configure with -DLMFUSE_CUDA=ON)";
  return nullptr;
}
bool cuda_weight_supported(DType) { return false; }
#endif

int32_t Backend::take_queued() { LMF_FAIL(name(), " backend: no queued decode step (can_chain is false)"); }

std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& o) {
  if (name == "cpu") return make_cpu_backend(o);
  if (name == "cuda" || name == "auto") {
    std::string why;
    if (auto b = make_cuda_backend(o, &why)) return b;
    if (name == "cuda") LMF_FAIL("CUDA backend unavailable: ", why);
    return make_cpu_backend(o);
  }
  LMF_FAIL("unknown device '", name, "' (expected cpu, cuda or auto)");
}

}  // namespace lmf
