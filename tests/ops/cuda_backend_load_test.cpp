// Loading a model on the CUDA backend. (1) A model that does not fit the free GPU memory is
// refused with one clear error (how much it needs, how much is free) instead of failing inside an
// allocation: the free memory is taken away with cudaMalloc until ~128 MiB are left, then a golden
// tiny model is loaded; with the memory given back, the same model loads and runs on a new
// backend. (2) The load reports its progress (BackendOptions::load_progress) once per layer and
// once for the rest, the bytes growing to the model's weight bytes.
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
  const std::string golden = cuda_test_golden_dir();
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

TEST(CudaBackend, LoadReportsProgressPerLayer) {
  const std::string golden = cuda_test_golden_dir();
  auto m = lmf::Model::load(golden + "llama-tiny-q4_1.gguf");
  struct Call {
    uint64_t done, total;
    int64_t k, n;
  };
  std::vector<Call> calls;
  lmf::BackendOptions bo;
  bo.n_ctx = 32;
  bo.load_progress = [&](uint64_t done, uint64_t total, int64_t k, int64_t n) { calls.push_back({done, total, k, n}); };
  auto be = lmf::make_backend("cuda", bo);
  be->load(*m);
  const int64_t parts = m->hp.n_layer + 1;
  ASSERT_TRUE(int64_t(calls.size()) == parts) << calls.size() << " calls for " << parts << " parts";
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].k, int64_t(i + 1));
    EXPECT_EQ(calls[i].n, parts);
    EXPECT_EQ(calls[i].total, m->weight_bytes());
    EXPECT_TRUE(calls[i].done > 0 && calls[i].done <= calls[i].total) << i << ": " << calls[i].done;
    if (i > 0) {
      EXPECT_TRUE(calls[i].done > calls[i - 1].done) << i;
    }
  }
  EXPECT_EQ(calls.back().done, m->weight_bytes());
}
