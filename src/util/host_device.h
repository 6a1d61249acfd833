// LMF_HOST_DEVICE: a function compiled for the host and, under nvcc, for the device too, so the
// CPU code and a CUDA kernel run the same source (util/round_fadd.h, sampling/pick.h).
#pragma once

#if defined(__CUDACC__)
#define LMF_HOST_DEVICE __host__ __device__
#else
#define LMF_HOST_DEVICE
#endif
