// Device sampling: radix select of the top candidates, bitonic sort, and the CPU sampler's loop
// run by one thread over the sorted candidates. Algorithm and contract: backend/cuda/sampling.h.
#include <cub/device/device_radix_sort.cuh>
#include <algorithm>
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


// ---- Many candidates (k = 0 or k > kSampleMaxK): full sort, then the CPU loops in order. ----

// keys[i] = ~ord(x[i]): an ascending stable sort of (keys, ids = 0..n-1) orders by logit
// descending, then id ascending: the CPU's by_logit order.
__global__ void sample_keys_kernel(const float* x, unsigned* keys, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) keys[i] = ~ord_of(x[i]);
}

__global__ void sample_iota_kernel(int* ids, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) ids[i] = i;
}

// A quarter of the spacing of doubles just above s (s > 0 normal, or 0 -> 0). Any e < this
// leaves s unchanged when added (round to nearest needs e >= half the spacing), and so does every
// later, smaller e: the factor 2 of slack covers exp() not being exactly monotone (its error
// is ~1 ulp, so a later e exceeds an earlier one by at most a few ulps).
__device__ __forceinline__ double quarter_ulp(double s) {
  const double pow2 = __longlong_as_double(__double_as_longlong(s) & 0x7FF0000000000000ll);  // 2^exponent(s)
  return pow2 * 0x1p-54;
}

// One block of kSampleThreads over the R best candidates, sorted: skey [R] (= ~ord, ascending),
// sid [R]. cum [R] is scratch for the running sums. Every sum the CPU sampler forms sequentially
// is formed here sequentially too, by thread 0, in the same order, from the same doubles; the
// other threads only compute those doubles (exp, division) a chunk ahead, which is per-element
// arithmetic and order-free.
__global__ void __launch_bounds__(kSampleThreads) sample_sorted_kernel(const unsigned* skey, const int* sid, int R,
                                                                      float temp, float top_p, float min_p, double u01,
                                                                      double* cum, int* out) {
  constexpr int C = kSampleThreads;
  __shared__ double e[C];  // one chunk of exp values (phase 1) or probabilities (phase 3)
  __shared__ double s_sum;
  __shared__ int s_stop1, s_stop3, s_keep, s_cut, s_ncum;
  const int tid = threadIdx.x;
  const float mx = val_of(~skey[0]);
  const double T = double(temp);
  auto ex = [&](int i) { return exp(double(val_of(~skey[i]) - mx) / T); };  // sampler.cpp's prob[i] before / sum
  if (tid == 0) {
    s_stop1 = 0;
    s_stop3 = 0;
    s_keep = R;
    s_cut = 0;
    s_ncum = 0;
  }
  // Phase 1: sum = e_0 + e_1 + ... + e_{R-1}, left to right. Stops early only where the rest
  // provably adds nothing (every remaining e is below half an ulp of the running sum).
  double sum = 0;  // thread 0's
  for (int base = 0; base < R; base += C) {
    e[tid] = base + tid < R ? ex(base + tid) : 0.0;
    __syncthreads();
    if (tid == 0) {
      if (e[0] < quarter_ulp(sum)) {
        s_stop1 = 1;
      } else {
        const int m = min(C, R - base);
        int j = 0;
        for (; j + 8 <= m; j += 8) {  // loads batched ahead of the dependent adds; order kept
          double v[8];
#pragma unroll
          for (int t = 0; t < 8; ++t) v[t] = e[j + t];
#pragma unroll
          for (int t = 0; t < 8; ++t) sum += v[t];
        }
        for (; j < m; ++j) sum += e[j];
      }
      s_sum = sum;
    }
    __syncthreads();
    if (s_stop1) break;
  }
  sum = s_sum;
  // Phase 2 (min-p): keep = the first i >= 1 with e_i / sum < min_p * (1 / sum), scanned chunk by
  // chunk in order so the first hit is the global first; the comparisons are the CPU's exactly.
  if (min_p > 0) {
    const double thr = double(min_p) * (1.0 / sum);
    for (int base = 0; base < R; base += C) {
      const int i = base + tid;
      if (i >= 1 && i < R && ex(i) / sum < thr) atomicMin(&s_keep, i);
      __syncthreads();
      const bool found = s_keep < R;
      __syncthreads();  // everyone has read s_keep before the next chunk's atomicMin
      if (found) break;
    }
  }
  const int keep_mp = s_keep;
  // Phase 3 (top-p, kept mass): c = prob_0 + prob_1 + ... left to right over i < keep, written
  // to cum[i]; stops at the first c >= top_p (the cut), or where the rest adds nothing (then c
  // never reaches top_p later either: it no longer changes).
  double c = 0;  // thread 0's
  for (int base = 0; base < keep_mp; base += C) {
    e[tid] = base + tid < keep_mp ? ex(base + tid) / sum : 0.0;
    __syncthreads();
    if (tid == 0) {
      if (e[0] < quarter_ulp(c)) {
        s_stop3 = 1;
      } else {
        const int m = min(C, keep_mp - base);
        const bool tp = top_p < 1;
        int j = 0, cut = -1;
        for (; j + 8 <= m && cut < 0; j += 8) {  // as in phase 1; the top-p test is off the add chain
          double v[8], r[8];
#pragma unroll
          for (int t = 0; t < 8; ++t) v[t] = e[j + t];
#pragma unroll
          for (int t = 0; t < 8; ++t) {
            c += v[t];
            r[t] = c;
            cum[base + j + t] = c;
          }
          if (tp && c >= top_p) {  // the running sum crossed top_p in this batch (it never decreases)
            int t = 0;
            while (r[t] < top_p) ++t;
            cut = j + t;
            c = r[t];  // the sums past the cut are not the CPU's: drop them
          }
        }
        for (; j < m && cut < 0; ++j) {
          c += e[j];
          cum[base + j] = c;
          if (tp && c >= top_p) cut = j;
        }
        if (cut >= 0) {
          s_cut = base + cut + 1;
          s_stop3 = 1;
          s_ncum = base + cut + 1;
        } else {
          s_ncum = base + m;
        }
      }
    }
    __syncthreads();
    if (s_stop3) break;
  }
  if (tid != 0) return;
  const int keep = s_cut ? s_cut : keep_mp;
  const int ncum = s_ncum;  // cum[ncum..keep) would all equal c
  // total = the same left-to-right sum over i < keep = c. Pick: the first i < keep with
  // u < cum[i]; cum is non-decreasing, so a binary search finds it; none -> keep - 1.
  const double u = u01 * c;
  int lo = 0, hi = ncum;  // first index in [0, ncum) with cum > u, or ncum
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (u < cum[mid])
      hi = mid;
    else
      lo = mid + 1;
  }
  *out = sid[lo < ncum ? lo : keep - 1];
}

}  // namespace dev

namespace {
// Candidates the CPU sorts: 1 when greedy, else k (0 or >= n: all n).
int64_t sample_candidates(const SamplingParams& p, int64_t n) {
  if (p.temperature <= 0) return 1;
  return p.top_k > 0 && p.top_k < n ? p.top_k : n;
}
}  // namespace

namespace {
// cub's scratch for sorting n (key, id) pairs; a pure host computation (no launch, no sync).
size_t sort_temp_bytes(int n) {
  size_t bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const unsigned*>(nullptr),
                                             static_cast<unsigned*>(nullptr), static_cast<const int*>(nullptr),
                                             static_cast<int*>(nullptr), n, 0, 32));
  return bytes;
}
}  // namespace

SampleScratch sample_scratch_alloc(int64_t n_vocab) {
  if (n_vocab <= 0 || n_vocab > INT32_MAX) LMF_FAIL("cuda sample scratch: bad vocabulary size ", n_vocab);
  SampleScratch s;
  s.n = n_vocab;
  const size_t n = size_t(n_vocab);
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&s.vals), n * sizeof(float)));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&s.pen_ids), n * sizeof(int)));
  CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&s.h_pen_ids), n * sizeof(int)));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&s.keys), 2 * n * sizeof(unsigned)));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&s.ids), 2 * n * sizeof(int)));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&s.cum), n * sizeof(double)));
  s.sort_bytes = sort_temp_bytes(int(n_vocab));
  CUDA_CHECK(cudaMalloc(&s.sort_tmp, std::max<size_t>(s.sort_bytes, 1)));
  // ids[0..n) = 0..n-1 once: the sort reads it and writes ids[n..2n), so it stays intact.
  const int blocks = int(std::min<int64_t>((n_vocab + 255) / 256, 1024));
  dev::sample_iota_kernel<<<blocks, 256>>>(s.ids, int(n_vocab));
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());
  return s;
}

void sample_scratch_free(SampleScratch& s) {
  if (s.vals) CUDA_CHECK(cudaFree(s.vals));
  if (s.pen_ids) CUDA_CHECK(cudaFree(s.pen_ids));
  if (s.h_pen_ids) CUDA_CHECK(cudaFreeHost(s.h_pen_ids));
  if (s.keys) CUDA_CHECK(cudaFree(s.keys));
  if (s.ids) CUDA_CHECK(cudaFree(s.ids));
  if (s.cum) CUDA_CHECK(cudaFree(s.cum));
  if (s.sort_tmp) CUDA_CHECK(cudaFree(s.sort_tmp));
  s = SampleScratch{};
}

bool sample_supported(const SamplingParams& p, int64_t n_vocab) { return n_vocab > 0 && n_vocab <= INT32_MAX; }

int upload_penalty_ids(const int32_t* ids, int64_t n_ids, SampleScratch& sc, cudaStream_t s) {
  if (n_ids < 0 || n_ids > sc.n || !sc.h_pen_ids) LMF_FAIL("cuda sample: ", n_ids, " penalty ids, scratch holds ", sc.n);
  if (n_ids == 0) return 0;
  std::memcpy(sc.h_pen_ids, ids, size_t(n_ids) * sizeof(int));
  CUDA_CHECK(cudaMemcpyAsync(sc.pen_ids, sc.h_pen_ids, size_t(n_ids) * sizeof(int), cudaMemcpyHostToDevice, s));
  return int(n_ids);
}

void sample(const float* x, int64_t n, const SamplingParams& p, const int* pen_ids, int n_pen, double u01, int* out,
            const SampleScratch& sc, cudaStream_t s) {
  if (!sample_supported(p, n)) LMF_FAIL("cuda sample: unsupported vocabulary size ", n);
  const int64_t R = sample_candidates(p, n);
  const bool many = R > kSampleMaxK;
  const bool penalize = p.repeat_penalty != 1.0f && n_pen > 0;
  if ((penalize || many) && (!sc.vals || n > sc.n))
    LMF_FAIL("cuda sample: scratch for ", sc.n, " logits, got ", n);
  const int blocks = int(std::min<int64_t>((n + 255) / 256, 4 * int64_t(device_sm_count())));
  const float* src = x;
  if (penalize) {
    dev::sample_copy_kernel<<<blocks, 256, 0, s>>>(x, sc.vals, int(n));
    CUDA_CHECK_LAUNCH();
    dev::sample_penalty_kernel<<<(n_pen + 255) / 256, 256, 0, s>>>(x, sc.vals, pen_ids, n_pen, int(n), p.repeat_penalty);
    CUDA_CHECK_LAUNCH();
    src = sc.vals;
  }
  if (!many) {
    dev::sample_kernel<<<1, dev::kSampleThreads, 0, s>>>(src, int(n), int(R), p.temperature, p.top_p, p.min_p, u01,
                                                         out);
    CUDA_CHECK_LAUNCH();
    return;
  }
  // Full sort of all n (the CPU's partial_sort of the top k yields the same first k), then the
  // CPU loops over the first R.
  size_t bytes = sc.sort_bytes;  // sized for sc.n >= n; cub fails (checked) if it were too small
  unsigned* keys_in = sc.keys;
  unsigned* keys_out = sc.keys + sc.n;
  const int* ids_in = sc.ids;
  int* ids_out = sc.ids + sc.n;
  dev::sample_keys_kernel<<<blocks, 256, 0, s>>>(src, keys_in, int(n));
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sc.sort_tmp, bytes, keys_in, keys_out, ids_in, ids_out, int(n), 0, 32, s));
  dev::sample_sorted_kernel<<<1, dev::kSampleThreads, 0, s>>>(keys_out, ids_out, int(R), p.temperature, p.top_p,
                                                              p.min_p, u01, sc.cum, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace lmf::cuda
