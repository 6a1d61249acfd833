// Weight upload at load: repacked rows stream to the GPU through two pinned staging buffers, so
// the pool packs one chunk of rows while the copy engine moves the chunk before it, and no packed
// copy of the model is ever made in pageable memory (docs/PERF.md S42-1: that copy's zero-fill and
// the synchronous pageable uploads were most of the 8B load).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>

#include "backend/cuda/kernels.h"

namespace lmf::cuda {

class WeightUploader {
 public:
  // Two staging buffers of buffer_bytes each (pinned host memory). pool packs the rows (null:
  // this thread).
  WeightUploader(cudaStream_t s, ThreadPool* pool, size_t buffer_bytes = size_t(32) << 20);
  ~WeightUploader();  // waits for the copies still in flight, then frees the buffers
  WeightUploader(const WeightUploader&) = delete;
  WeightUploader& operator=(const WeightUploader&) = delete;

  // A device weight of `rows` packed rows (kernels.h layout), row r from src(r). Returns once
  // every row is packed and its copy queued on the stream; finish() waits for the copies.
  // Throws lmf::Error for an unsupported type or shape (nothing left allocated then).
  DeviceWeight upload(DType t, int64_t rows, int64_t cols, const RowSource& src);
  // n bytes as they are (the embedding table), through the same buffers. The caller frees the
  // returned device memory with cudaFree.
  void* upload_bytes(const void* src, size_t n);
  void finish();

  double pack_seconds() const { return pack_s_; }  // packing rows into the buffers
  double wait_seconds() const { return wait_s_; }  // waiting for a buffer's previous copy
  uint64_t bytes() const { return bytes_; }        // device bytes written

 private:
  struct Slot {
    uint8_t* buf = nullptr;
    cudaEvent_t done = nullptr;  // the slot's last copy has finished
  };
  // One copy out of a staging buffer: n bytes at offset off to dst (n = 0: none).
  struct Copy {
    void* dst;
    size_t off, n;
  };
  void release();
  // Fills the next buffer once the copies that last read it have finished (fill is timed as
  // packing), queues the copies out of it and records its event.
  void send(const std::function<void(uint8_t*)>& fill, std::initializer_list<Copy> copies);
  cudaStream_t stream_;
  ThreadPool* pool_;
  size_t buffer_bytes_;
  Slot slots_[2];
  int next_ = 0;
  double pack_s_ = 0, wait_s_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace lmf::cuda
