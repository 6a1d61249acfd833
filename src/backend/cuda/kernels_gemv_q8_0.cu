// GEMV instances for Q8_0 weights (the allow-list in kernels/gemv_launch.cuh).
#include "backend/cuda/kernels/gemv_launch.cuh"

LMF_GEMV_TYPE_FILE(q8_0, DType::Q8_0)
