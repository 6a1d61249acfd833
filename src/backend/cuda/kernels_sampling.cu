// Device sampling: radix select of the top candidates, bitonic sort, and the CPU sampler's loop
// run by one thread over the sorted candidates. Algorithm and contract: backend/cuda/sampling.h.
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/sampling.h"
#include "util/status.h"

namespace lmf::cuda {
namespace dev {

constexpr int kSampleThreads = kSampleMaxK;  // one candidate slot per thread in the sort

// Unsigned order of a float: larger float -> larger value; -0 is folded into +0 so that equal
// logits compare equal (and are then ordered by id), as the CPU's float comparison does.
__device__ __forceinline__ unsigned ord_of(float v) {
  const unsigned b = v == 0.0f ? 0u : __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float val_of(unsigned o) {
  return __uint_as_float((o & 0x80000000u) ? (o & 0x7FFFFFFFu) : ~o);
}
// Unique per token; descending key order = (logit desc, id asc). Never 0 for a real token
// (the id part is >= 2^32 - 2^31), so 0 pads the sort.
__device__ __forceinline__ unsigned long long key_of(float v, int i) {
  return (static_cast<unsigned long long>(ord_of(v)) << 32) | (0xFFFFFFFFu - unsigned(i));
}
__device__ __forceinline__ int id_of(unsigned long long k) { return int(0xFFFFFFFFu - unsigned(k)); }

__global__ void sample_copy_kernel(const float* x, float* y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = x[i];
}

// y[t] = penalized x[t] for the listed ids (llama.cpp rule, same float ops as the CPU sampler).
__global__ void sample_penalty_kernel(const float* x, float* y, const int* ids, int n_ids, int n, float rp) {
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < n_ids; j += gridDim.x * blockDim.x) {
    const int t = ids[j];
    if (t >= 0 && t < n) {
      const float l = x[t];
      y[t] = l > 0 ? l / rp : l * rp;
    }
  }
}

// One block of kSampleThreads. x [n] (already penalized), R = candidates (k, or 1 when greedy).
__global__ void __launch_bounds__(kSampleThreads) sample_kernel(const float* x, int n, int R, float temp,
                                                               float top_p, float min_p, double u01, int* out) {
  __shared__ unsigned hist[256];
  __shared__ unsigned long long keys[kSampleThreads];  // candidates, sorted descending
  __shared__ double prob[kSampleThreads];
  __shared__ unsigned long long s_prefix;
  __shared__ unsigned s_need;
  __shared__ int s_done, s_cnt;
  const int tid = threadIdx.x;
  if (tid == 0) {
    s_prefix = 0;
    s_need = unsigned(R);
    s_done = 0;
    s_cnt = 0;
  }
  // Radix select, most significant digit first: s_prefix collects the digits of the R-th largest
  // key; s_need is how many keys are still wanted inside the current prefix.
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    const unsigned long long pre = s_prefix;
    const int hs = shift + 8;  // the bits above this digit must equal the prefix's
    for (int i = tid; i < n; i += blockDim.x) {
      const unsigned long long k = key_of(x[i], i);
      if (hs == 64 || (k >> hs) == (pre >> hs)) atomicAdd(&hist[(k >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      unsigned above = 0;
      const unsigned need = s_need;
      int b = 255;
      for (; b > 0; --b) {
        if (above + hist[b] >= need) break;
        above += hist[b];
      }
      s_prefix = pre | (static_cast<unsigned long long>(b) << shift);
      s_need = need - above;
      // The whole bin is wanted: every key >= s_prefix (low bits zero) is a candidate, and
      // there are exactly R of them. At shift 0 the bin is a single key, so this always ends.
      if (hist[b] == need - above) s_done = 1;
    }
    __syncthreads();
    if (s_done) break;
  }
  const unsigned long long lo = s_prefix;
  keys[tid] = 0;
  __syncthreads();
  for (int i = tid; i < n; i += blockDim.x) {
    const unsigned long long k = key_of(x[i], i);
    if (k >= lo) {
      const int slot = atomicAdd(&s_cnt, 1);
      if (slot < kSampleThreads) keys[slot] = k;
    }
  }
  __syncthreads();
  // Bitonic sort, descending (padding zeros sink to the end).
  for (unsigned k = 2; k <= unsigned(kSampleThreads); k <<= 1)
    for (unsigned j = k >> 1; j > 0; j >>= 1) {
      const unsigned i = unsigned(tid), p = i ^ j;
      if (p > i) {
        const unsigned long long a = keys[i], b = keys[p];
        const bool desc = (i & k) == 0;
        if (desc ? a < b : a > b) {
          keys[i] = b;
          keys[p] = a;
        }
      }
      __syncthreads();
    }
  if (temp <= 0) {
    if (tid == 0) *out = id_of(keys[0]);
    return;
  }
  // From here on: the CPU sampler's arithmetic, in its order (sampler.cpp).
  const float mx = val_of(unsigned(keys[0] >> 32));
  for (int j = tid; j < R; j += blockDim.x) prob[j] = exp(double(val_of(unsigned(keys[j] >> 32)) - mx) / double(temp));
  __syncthreads();
  if (tid != 0) return;
  double sum = 0;
  for (int i = 0; i < R; ++i) sum += prob[i];
  for (int i = 0; i < R; ++i) prob[i] /= sum;
  int keep = R;
  if (min_p > 0)
    for (int i = 1; i < R; ++i)
      if (prob[i] < min_p * prob[0]) {
        keep = i;
        break;
      }
  if (top_p < 1) {
    double c = 0;
    for (int i = 0; i < keep; ++i) {
      c += prob[i];
      if (c >= top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double total = 0;
  for (int i = 0; i < keep; ++i) total += prob[i];
  const double u = u01 * total;
  double c = 0;
  int pick = keep - 1;
  for (int i = 0; i < keep; ++i) {
    c += prob[i];
    if (u < c) {
      pick = i;
      break;
    }
  }
  *out = id_of(keys[pick]);
}

}  // namespace dev

namespace {
// Candidates the CPU sorts: 1 when greedy, else k (0 or >= n: all n).
int64_t sample_candidates(const SamplingParams& p, int64_t n) {
  if (p.temperature <= 0) return 1;
  return p.top_k > 0 && p.top_k < n ? p.top_k : n;
}
}  // namespace

SampleScratch sample_scratch_alloc(int64_t n_vocab) {
  if (n_vocab <= 0 || n_vocab > INT32_MAX) LMF_FAIL("cuda sample scratch: bad vocabulary size ", n_vocab);
  SampleScratch s;
  s.n = n_vocab;
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&s.vals), size_t(n_vocab) * sizeof(float)));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&s.pen_ids), size_t(n_vocab) * sizeof(int)));
  CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&s.h_pen_ids), size_t(n_vocab) * sizeof(int)));
  return s;
}

void sample_scratch_free(SampleScratch& s) {
  if (s.vals) CUDA_CHECK(cudaFree(s.vals));
  if (s.pen_ids) CUDA_CHECK(cudaFree(s.pen_ids));
  if (s.h_pen_ids) CUDA_CHECK(cudaFreeHost(s.h_pen_ids));
  s = SampleScratch{};
}

bool sample_supported(const SamplingParams& p, int64_t n_vocab) {
  return n_vocab > 0 && n_vocab <= INT32_MAX && sample_candidates(p, n_vocab) <= kSampleMaxK;
}

int upload_penalty_ids(const int32_t* ids, int64_t n_ids, SampleScratch& sc, cudaStream_t s) {
  if (n_ids < 0 || n_ids > sc.n || !sc.h_pen_ids) LMF_FAIL("cuda sample: ", n_ids, " penalty ids, scratch holds ", sc.n);
  if (n_ids == 0) return 0;
  std::memcpy(sc.h_pen_ids, ids, size_t(n_ids) * sizeof(int));
  CUDA_CHECK(cudaMemcpyAsync(sc.pen_ids, sc.h_pen_ids, size_t(n_ids) * sizeof(int), cudaMemcpyHostToDevice, s));
  return int(n_ids);
}

void sample(const float* x, int64_t n, const SamplingParams& p, const int* pen_ids, int n_pen, double u01, int* out,
            const SampleScratch& sc, cudaStream_t s) {
  if (!sample_supported(p, n))
    LMF_FAIL("cuda sample: unsupported configuration (temperature ", p.temperature, ", top-k ", p.top_k, ", vocabulary ", n,
             "; needs greedy or at most ", kSampleMaxK, " candidates)");
  const float* src = x;
  if (p.repeat_penalty != 1.0f && n_pen > 0) {
    if (!sc.vals || n > sc.n) LMF_FAIL("cuda sample: scratch for ", sc.n, " logits, got ", n);
    const int blocks = int(std::min<int64_t>((n + 255) / 256, 4 * int64_t(device_sm_count())));
    dev::sample_copy_kernel<<<blocks, 256, 0, s>>>(x, sc.vals, int(n));
    CUDA_CHECK_LAUNCH();
    dev::sample_penalty_kernel<<<(n_pen + 255) / 256, 256, 0, s>>>(x, sc.vals, pen_ids, n_pen, int(n), p.repeat_penalty);
    CUDA_CHECK_LAUNCH();
    src = sc.vals;
  }
  dev::sample_kernel<<<1, dev::kSampleThreads, 0, s>>>(src, int(n), int(sample_candidates(p, n)), p.temperature, p.top_p,
                                                       p.min_p, u01, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace lmf::cuda
