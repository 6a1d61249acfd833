// The CUDA backend refuses a model that does not fit the free GPU memory with one clear error
// (how much it needs, how much is free) instead of failing inside an allocation: the free memory
// is taken away with cudaMalloc until ~128 MiB are left, then a golden tiny model is loaded. With
// the memory given back, the same model loads and runs on a new backend.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cuda_test.h"
#include "cuda_test_util.h"
#include "model/model.h"
#include "runtime/session.h"
#include "util/status.h"

TEST(CudaBackend, RefusesAModelThatDoesNotFitTheFreeMemory) {
  const std::string golden = std::string(LMFUSE_SOURCE_DIR) + "/tests/data/golden/";
  auto m = lmf::Model::load(golden + "qwen3-tiny-q4_0.gguf");
  lmf::BackendOptions bo;
  bo.n_ctx = 64;
  auto be = lmf::make_backend("cuda", bo);  // its own stream and handles exist before the hog

  std::vector<void*> hog;
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  constexpr size_t kLeave = 128ull << 20;
  while (free_b > kLeave + (32ull << 20)) {
    void* p = nullptr;
    const size_t chunk = std::min<size_t>(free_b - kLeave, 1ull << 30);
    if (cudaMalloc(&p, chunk) != cudaSuccess) {
      cudaGetLastError();  // clear the allocation error; take what we got
      break;
    }
    hog.push_back(p);
    cudaMemGetInfo(&free_b, &total_b);
  }
  std::string what;
  try {
    be->load(*m);
  } catch (const lmf::Error& e) {
    what = e.what();
  }
  for (void* p : hog) cudaFree(p);
  EXPECT_TRUE(what.find("MiB of GPU memory") != std::string::npos) << "free " << (free_b >> 20) << " MiB, error: '" << what << "'";
  EXPECT_TRUE(what.find("MiB are free") != std::string::npos) << what;
  EXPECT_TRUE(what.find('\n') == std::string::npos) << "one line: " << what;

  auto ok = lmf::make_backend("cuda", bo);
  ok->load(*m);
  lmf::Session s(*m, *ok);
  const std::vector<int32_t> toks = {1, 5, 9};
  EXPECT_EQ(s.eval(toks, false).size(), size_t(m->hp.n_vocab));
}
