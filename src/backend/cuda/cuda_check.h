// CUDA_CHECK: wraps a CUDA runtime call; on failure throws lmf::Error naming the statement, the
// file and line, the current device and CUDA's own message. Failures are loud: never continue.
#pragma once
#include <cuda_runtime_api.h>

#include "util/status.h"

#define CUDA_CHECK(stmt)                                                                     \
  do {                                                                                       \
    cudaError_t lmf_cuda_err_ = (stmt);                                                      \
    if (lmf_cuda_err_ != cudaSuccess) {                                                      \
      int lmf_cuda_dev_ = -1;                                                                \
      cudaGetDevice(&lmf_cuda_dev_);                                                         \
      throw ::lmf::Error(::lmf::cat("CUDA error: ", #stmt, " (", __FILE__, ":", __LINE__,   \
                                    ", device ", lmf_cuda_dev_,                              \
                                    "): ", cudaGetErrorString(lmf_cuda_err_)));              \
    }                                                                                        \
  } while (0)

// After a kernel launch: reports launch-configuration errors at the launch site.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
