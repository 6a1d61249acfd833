// The launch timeline (backend/cuda/timeline.h, kernels/common.cuh tl_*): two dependent GEMVs
// captured with timeline slots and replayed are both stamped in order (the second's PDL wait
// returns after the first's last warp exits), a slot given to no kernel stays unstamped, and the
// stamps do not change the results.
#include <cuda_runtime.h>

#include "backend/cuda/timeline.h"
#include "cuda_test.h"
#include "cuda_test_util.h"

using namespace lmfct_cuda;
using namespace lmf::cuda;

TEST(CudaTimeline, ReplayedChainStampsInOrder) {
  std::mt19937 rng(77);
  const int64_t n = 1024;
  auto wq = random_rows(DType::Q4_0, n, n, rng);
  auto hp = repack_rows(DType::Q4_0, wq.data(), n, n);
  DeviceWeight dw = upload_weight(hp);
  auto in = randn(n, rng);
  DevBuf<float> d_in(in), d_mid(n), d_out(n);
  cudaStream_t s;
  ASSERT_TRUE(cudaStreamCreate(&s) == cudaSuccess);
  TimelineSlots slots(3);
  auto chain = [&](bool stamped) {
    GemvArgs a;
    a.w = &dw;
    a.in = d_in.p();
    a.y = d_mid.p();
    a.tl = stamped ? slots.slot(0) : nullptr;
    gemv(Prologue::None, Epilogue::Store, a, s);
    GemvArgs b = a;
    b.in = d_mid.p();
    b.y = d_out.p();
    b.tl = stamped ? slots.slot(1) : nullptr;  // slot 2: given to no kernel
    gemv(Prologue::None, Epilogue::Store, b, s);
  };
  chain(false);  // eager: instance attributes set before capture
  ASSERT_TRUE(cudaStreamSynchronize(s) == cudaSuccess);
  const auto plain = d_out.get();
  cudaGraph_t g;
  ASSERT_TRUE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  chain(true);
  ASSERT_TRUE(cudaStreamEndCapture(s, &g) == cudaSuccess);
  cudaGraphExec_t ge;
  ASSERT_TRUE(cudaGraphInstantiate(&ge, g, 0) == cudaSuccess);
  const std::vector<SlotTimes> t = slots.replay(ge, s);
  ASSERT_TRUE(cudaStreamSynchronize(s) == cudaSuccess);
  EXPECT_TRUE(d_out.get() == plain) << "stamped replay changed the result";
  ASSERT_TRUE(t.size() == 3);
  EXPECT_TRUE(t[0].stamped && t[1].stamped);
  EXPECT_TRUE(!t[2].stamped);
  for (int k = 0; k < 2; ++k) {
    EXPECT_LE(t[size_t(k)].start, t[size_t(k)].wait) << "slot " << k;
    EXPECT_LE(t[size_t(k)].wait, t[size_t(k)].phase_end) << "slot " << k;
    EXPECT_LE(t[size_t(k)].phase_end, t[size_t(k)].end) << "slot " << k;
    EXPECT_TRUE(t[size_t(k)].phase_mean > 0) << "slot " << k;
  }
  EXPECT_EQ(t[0].start, 0.0);                // the replay's earliest start
  EXPECT_LE(t[0].end, t[1].wait);            // released only after the first kernel's last warp
  EXPECT_TRUE(t[1].end > t[0].end);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  free_weight(dw);
}
