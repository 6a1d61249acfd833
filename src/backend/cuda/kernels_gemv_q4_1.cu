// GEMV instances for Q4_1 weights (the allow-list in kernels/gemv_launch.cuh).
#include "backend/cuda/kernels/gemv_launch.cuh"

LMF_GEMV_TYPE_FILE(q4_1, DType::Q4_1)
