#include "backend/cuda/upload.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "util/status.h"

namespace lmf::cuda {
namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

WeightUploader::WeightUploader(cudaStream_t s, ThreadPool* pool, size_t buffer_bytes)
    : stream_(s), pool_(pool), buffer_bytes_(buffer_bytes) {
  try {
    for (Slot& sl : slots_) {
      CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&sl.buf), buffer_bytes_));
      CUDA_CHECK(cudaEventCreateWithFlags(&sl.done, cudaEventDisableTiming));
    }
  } catch (...) {
    release();
    throw;
  }
}

WeightUploader::~WeightUploader() { release(); }

void WeightUploader::release() {
  cudaStreamSynchronize(stream_);  // no copy may still read a buffer being freed
  for (Slot& sl : slots_) {
    if (sl.done) cudaEventDestroy(sl.done);
    if (sl.buf) cudaFreeHost(sl.buf);
    sl = Slot{};
  }
}

DeviceWeight WeightUploader::upload(DType t, int64_t rows, int64_t cols, const RowSource& src) {
  if (rows <= 0 || cols <= 0 || cols % QK != 0)
    LMF_FAIL("cuda upload: shape must be positive with cols a multiple of 32, got ", rows, "x", cols);
  const size_t qr = packed_q_bytes(t, cols), sr = packed_scale_bytes(t, cols);
  if (qr + sr > buffer_bytes_) LMF_FAIL("cuda upload: a row of ", qr + sr, " bytes exceeds the staging buffer");
  DeviceWeight w;
  w.type = t;
  w.rows = rows;
  w.cols = cols;
  w.q_bytes = qr * size_t(rows);
  w.scale_bytes = sr * size_t(rows);
  uint8_t* q = nullptr;
  uint8_t* sc = nullptr;
  try {
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&q), w.q_bytes));
    if (sr) CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&sc), w.scale_bytes));
    const int64_t chunk = int64_t(buffer_bytes_ / (qr + sr));
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
      const int64_t r1 = std::min(rows, r0 + chunk);
      const size_t nq = qr * size_t(r1 - r0), ns = sr * size_t(r1 - r0);
      send([&](uint8_t* b) { pack_rows(t, cols, r0, r1, src, b, b + nq, pool_); },
           {{q + qr * size_t(r0), 0, nq}, {sc + sr * size_t(r0), nq, ns}});
    }
  } catch (...) {
    cudaStreamSynchronize(stream_);
    cudaFree(q);
    cudaFree(sc);
    throw;
  }
  bytes_ += w.q_bytes + w.scale_bytes;
  w.q = q;
  w.scales = sc;
  return w;
}

void WeightUploader::send(const std::function<void(uint8_t*)>& fill, std::initializer_list<Copy> copies) {
  Slot& sl = slots_[next_];
  next_ ^= 1;
  auto t0 = std::chrono::steady_clock::now();
  CUDA_CHECK(cudaEventSynchronize(sl.done));  // the copies that last read this buffer
  wait_s_ += seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  fill(sl.buf);
  pack_s_ += seconds_since(t0);
  for (const Copy& c : copies)
    if (c.n) CUDA_CHECK(cudaMemcpyAsync(c.dst, sl.buf + c.off, c.n, cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaEventRecord(sl.done, stream_));
}

void* WeightUploader::upload_bytes(const void* src, size_t n) {
  uint8_t* d = nullptr;
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d), std::max<size_t>(n, 1)));
  try {
    for (size_t off = 0; off < n; off += buffer_bytes_) {
      const size_t len = std::min(buffer_bytes_, n - off);
      send([&](uint8_t* b) { std::memcpy(b, static_cast<const uint8_t*>(src) + off, len); }, {{d + off, 0, len}});
    }
  } catch (...) {
    cudaStreamSynchronize(stream_);
    cudaFree(d);
    throw;
  }
  bytes_ += n;
  return d;
}

void WeightUploader::finish() { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

}  // namespace lmf::cuda
