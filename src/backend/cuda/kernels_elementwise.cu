// Launchers of the unfused building blocks (kernels/elementwise.cuh).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels/elementwise.cuh"

namespace lmf::cuda {
namespace {
int ew_blocks(int64_t n) { return int(std::min<int64_t>((n + 255) / 256, 4 * int64_t(device_sm_count()))); }
}  // namespace

void embed_lookup(DType t, const void* table, int64_t cols, const int* token, float* out,
                  cudaStream_t s) {
  if (cols <= 0 || (t != DType::F32 && t != DType::F16 && t != DType::BF16 && cols % 32 != 0))
    LMF_FAIL("cuda embed: bad cols ", cols);
  const auto* tb = static_cast<const uint8_t*>(table);
  const size_t rb = row_bytes(t, cols);
  const int blocks = int((cols + 255) / 256);
  const bool early = (dev::pdl_early_trigger() & kEarlyEmbed) != 0;
  switch (t) {
    case DType::F32: dev::embed_kernel<DType::F32><<<blocks, 256, 0, s>>>(tb, rb, int(cols), token, out, early); break;
    case DType::F16: dev::embed_kernel<DType::F16><<<blocks, 256, 0, s>>>(tb, rb, int(cols), token, out, early); break;
    case DType::BF16: dev::embed_kernel<DType::BF16><<<blocks, 256, 0, s>>>(tb, rb, int(cols), token, out, early); break;
    case DType::Q4_0: dev::embed_kernel<DType::Q4_0><<<blocks, 256, 0, s>>>(tb, rb, int(cols), token, out, early); break;
    case DType::Q4_1: dev::embed_kernel<DType::Q4_1><<<blocks, 256, 0, s>>>(tb, rb, int(cols), token, out, early); break;
    case DType::Q8_0: dev::embed_kernel<DType::Q8_0><<<blocks, 256, 0, s>>>(tb, rb, int(cols), token, out, early); break;
    case DType::Q4_K: dev::embed_kernel<DType::Q4_K><<<blocks, 256, 0, s>>>(tb, rb, int(cols), token, out, early); break;
    case DType::Q5_K: dev::embed_kernel<DType::Q5_K><<<blocks, 256, 0, s>>>(tb, rb, int(cols), token, out, early); break;
    case DType::Q6_K: dev::embed_kernel<DType::Q6_K><<<blocks, 256, 0, s>>>(tb, rb, int(cols), token, out, early); break;
    default: LMF_FAIL("cuda embed: unsupported type ", dtype_name(t));
  }
  CUDA_CHECK_LAUNCH();
}

void rmsnorm_rows(const float* x, const float* gamma, float* y, int64_t rows, int n, float eps,
                  cudaStream_t s) {
  if (rows <= 0 || n <= 0) LMF_FAIL("cuda rmsnorm: bad shape ", rows, "x", n);
  // Same thread count as the GEMV Norm prologue: same partial sums, bit-identical results.
  dev::rmsnorm_rows_kernel<<<unsigned(rows), dev::kNormThreads, 0, s>>>(x, gamma, y, n, eps);
  CUDA_CHECK_LAUNCH();
}

void rope(float* x, int n_heads, int head_dim, RopeStyle st, float theta, const float* ff, const int* pos,
          cudaStream_t s) {
  if (head_dim % 2 != 0 || head_dim > 2048) LMF_FAIL("cuda rope: bad head_dim ", head_dim);
  dev::rope_kernel<<<n_heads, head_dim / 2, 0, s>>>(x, head_dim, st, theta, ff, pos);
  CUDA_CHECK_LAUNCH();
}

void kv_store(const float* k, const float* v, uint16_t* k_cache, uint16_t* v_cache, int n_kv,
              int head_dim, int64_t n_ctx, const int* pos, cudaStream_t s) {
  if (head_dim > 1024) LMF_FAIL("cuda kv_store: bad head_dim ", head_dim);
  dev::kv_store_kernel<<<n_kv, head_dim, 0, s>>>(k, v, reinterpret_cast<__half*>(k_cache),
                                                  reinterpret_cast<__half*>(v_cache), head_dim,
                                                  int(n_ctx), pos);
  CUDA_CHECK_LAUNCH();
}

void add(const float* a, const float* b, float* y, int64_t n, cudaStream_t s) {
  dev::add_kernel<<<ew_blocks(n), 256, 0, s>>>(a, b, y, n);
  CUDA_CHECK_LAUNCH();
}
void silu_mul(const float* g, const float* u, float* y, int64_t n, cudaStream_t s) {
  dev::silu_mul_kernel<<<ew_blocks(n), 256, 0, s>>>(g, u, y, n);
  CUDA_CHECK_LAUNCH();
}

ArgmaxScratch argmax_scratch_alloc() {
  ArgmaxScratch a;
  a.blocks = 2 * device_sm_count();
  CUDA_CHECK(cudaMalloc(&a.partial, size_t(a.blocks) * 8));
  CUDA_CHECK(cudaMalloc(&a.counter, sizeof(unsigned)));
  CUDA_CHECK(cudaMemset(a.counter, 0, sizeof(unsigned)));
  return a;
}
void argmax_scratch_free(ArgmaxScratch& a) {
  if (a.partial) CUDA_CHECK(cudaFree(a.partial));
  if (a.counter) CUDA_CHECK(cudaFree(a.counter));
  a = ArgmaxScratch{};
}
void argmax(const float* x, int64_t n, int* out, const ArgmaxScratch& sc, cudaStream_t s, ChainOut chain) {
  if (n <= 0 || n > (int64_t(1) << 31) - 1 || !sc.partial) LMF_FAIL("cuda argmax: bad n or scratch");
  float* pv = static_cast<float*>(sc.partial);
  int* pi = reinterpret_cast<int*>(pv + sc.blocks);
  dev::argmax_kernel<<<sc.blocks, 256, 0, s>>>(x, n, out, pv, pi, sc.counter, chain.io, chain.next_pos, chain.host);
  CUDA_CHECK_LAUNCH();
}
void chain_id(const int* id, ChainOut chain, cudaStream_t s) {
  dev::chain_id_kernel<<<1, 1, 0, s>>>(id, chain.io, chain.next_pos, chain.host);
  CUDA_CHECK_LAUNCH();
}

}  // namespace lmf::cuda
