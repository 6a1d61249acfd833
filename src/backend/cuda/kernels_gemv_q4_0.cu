// GEMV instances for Q4_0 weights (the allow-list in kernels/gemv_launch.cuh).
#include "backend/cuda/kernels/gemv_launch.cuh"

LMF_GEMV_TYPE_FILE(q4_0, DType::Q4_0)
