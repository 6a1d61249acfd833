// The load's weight upload (upload.h): rows packed in pieces into two pinned staging buffers and
// copied while the next piece is packed. With a buffer small enough that every weight takes many
// pieces (and the two buffers alternate within and across weights), the device bytes equal the
// one-piece repack (repack_concat / repack_gate_up) for every type, the raw-byte upload equals its
// source, and a row larger than a buffer or an unsupported type is refused with nothing left
// allocated.
#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "backend/cuda/upload.h"
#include "cuda_test.h"
#include "cuda_test_util.h"
#include "util/threadpool.h"

using namespace lmfct_cuda;
using namespace lmf::cuda;

namespace {
std::vector<uint8_t> device_bytes(const void* d, size_t n) {
  std::vector<uint8_t> h(n);
  if (n) cudaMemcpy(h.data(), d, n, cudaMemcpyDeviceToHost);
  return h;
}
}  // namespace

TEST(CudaUpload, PiecesThroughTwoBuffersGiveTheRepackedBytes) {
  std::mt19937 rng(17);
  cudaStream_t s;
  ASSERT_TRUE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  lmf::ThreadPool pool(3);
  {
    WeightUploader up(s, &pool, 40000);  // a few dozen rows per piece at 1,056 columns
    for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::F16, DType::BF16}) {
      const int64_t cols = 1056;
      auto a = random_rows(t, 301, cols, rng), b = random_rows(t, 77, cols, rng);
      const std::vector<RowsRef> parts = {RowsRef{a.data(), 301}, RowsRef{b.data(), 77}};
      const HostPacked cat = repack_concat(t, parts, cols), gu = repack_gate_up(t, a.data(), b.data(), 77, cols);
      DeviceWeight dc = up.upload(t, 378, cols, concat_source(t, parts, cols));
      DeviceWeight dg = up.upload(t, 154, cols, gate_up_source(t, a.data(), b.data(), cols));
      up.finish();
      EXPECT_TRUE(dc.type == t && dc.rows == 378 && dc.cols == cols && dg.rows == 154) << dtype_name(t);
      EXPECT_TRUE(device_bytes(dc.q, dc.q_bytes) == cat.q && device_bytes(dc.scales, dc.scale_bytes) == cat.scales)
          << dtype_name(t) << " concat";
      EXPECT_TRUE(device_bytes(dg.q, dg.q_bytes) == gu.q && device_bytes(dg.scales, dg.scale_bytes) == gu.scales)
          << dtype_name(t) << " gate/up";
      EXPECT_TRUE((dc.scales == nullptr) == (t == DType::F16 || t == DType::BF16)) << dtype_name(t);
      free_weight(dc);
      free_weight(dg);
    }
    std::vector<uint8_t> raw(100003);
    for (auto& c : raw) c = uint8_t(rng());
    void* d = up.upload_bytes(raw.data(), raw.size());
    up.finish();
    EXPECT_TRUE(device_bytes(d, raw.size()) == raw) << "raw bytes";
    cudaFree(d);
    EXPECT_TRUE(up.bytes() > raw.size());
  }
  cudaStreamDestroy(s);
}

TEST(CudaUpload, RefusesRowsLargerThanABufferAndOtherTypes) {
  std::mt19937 rng(19);
  cudaStream_t s;
  ASSERT_TRUE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  {
    WeightUploader up(s, nullptr, 1024);
    auto a = random_rows(DType::Q8_0, 4, 1024, rng);  // 1,088 packed bytes per row
    size_t free0 = 0, free1 = 0, total = 0;
    cudaMemGetInfo(&free0, &total);
    EXPECT_TRUE(throws_error([&] { up.upload(DType::Q8_0, 4, 1024, concat_source(DType::Q8_0, {RowsRef{a.data(), 4}}, 1024)); }))
        << "row over the buffer";
    EXPECT_TRUE(throws_error([&] { up.upload(DType::F32, 4, 64, concat_source(DType::Q8_0, {RowsRef{a.data(), 4}}, 64)); }))
        << "F32";
    EXPECT_TRUE(throws_error([&] { up.upload(DType::Q4_0, 4, 48, concat_source(DType::Q4_0, {RowsRef{a.data(), 4}}, 48)); }))
        << "48 columns";
    WeightUploader big(s, nullptr, 4096);  // 2 TB of rows: the device allocation fails
    EXPECT_TRUE(throws_error([&] { big.upload(DType::Q4_0, int64_t(1) << 36, 64, concat_source(DType::Q4_0, {RowsRef{a.data(), 4}}, 64)); }))
        << "2 TB";
    cudaGetLastError();  // the failed cudaMalloc's error, not sticky: clear it for the tests after
    cudaMemGetInfo(&free1, &total);
    EXPECT_TRUE(free1 >= free0) << free0 - free1 << " bytes kept";  // may grow: frees elsewhere land late
    EXPECT_EQ(up.bytes(), uint64_t(0));
  }
  cudaStreamDestroy(s);
}
