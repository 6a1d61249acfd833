// GEMV instances for F16 weights (the allow-list in kernels/gemv_launch.cuh).
#include "backend/cuda/kernels/gemv_launch.cuh"

LMF_GEMV_TYPE_FILE(f16, DType::F16)
