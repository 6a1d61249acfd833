// GEMV instances for Q4_K weights (the allow-list in kernels/gemv_launch.cuh; the packed K-quant form
// of kernels.h).
#include "backend/cuda/kernels/gemv_launch.cuh"

LMF_GEMV_TYPE_FILE(q4_k, DType::Q4_K)
