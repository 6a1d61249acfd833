// Device sampling: radix select of the top candidates, bitonic sort, and the CPU sampler's loop
// run by one thread over the sorted candidates. Algorithm and contract: backend/cuda/sampling.h.
#include <cub/device/device_radix_sort.cuh>
#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/sampling.h"
#include "sampling/chunked_sum.h"
#include "sampling/pick.h"
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
__device__ __forceinline__ unsigned long long key_of_ord(unsigned o, int i) {
  return (static_cast<unsigned long long>(o) << 32) | (0xFFFFFFFFu - unsigned(i));
}
__device__ __forceinline__ unsigned long long key_of(float v, int i) { return key_of_ord(ord_of(v), i); }
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

// Bitonic sort of keys[0, S) descending, S a power of two <= blockDim.x (every thread of the
// block calls it; it ends with a barrier).
__device__ __forceinline__ void bitonic_sort_desc(unsigned long long* keys, unsigned S) {
  const unsigned i = threadIdx.x;
  for (unsigned k = 2; k <= S; k <<= 1)
    for (unsigned j = k >> 1; j > 0; j >>= 1) {
      const unsigned p = i ^ j;
      if (i < S && p > i) {
        const unsigned long long a = keys[i], b = keys[p];
        const bool desc = (i & k) == 0;
        if (desc ? a < b : a > b) {
          keys[i] = b;
          keys[p] = a;
        }
      }
      __syncthreads();
    }
}

// The R candidates keys[0..R) sorted descending (all threads of the block call it, after the
// sort's barrier): greedy takes the first; else the exp() per candidate in parallel (the CPU's
// expression), then the CPU sampler's own code (sampling/pick.h) in one thread.
__device__ __forceinline__ void pick_from_sorted(const unsigned long long* keys, double* prob, int R, float temp,
                                                 float top_p, float min_p, double u01, int* out) {
  const int tid = threadIdx.x;
  if (temp <= 0) {
    if (tid == 0) *out = id_of(keys[0]);
    return;
  }
  const float mx = val_of(unsigned(keys[0] >> 32));
  for (int j = tid; j < R; j += blockDim.x) prob[j] = exp(double(val_of(unsigned(keys[j] >> 32)) - mx) / double(temp));
  __syncthreads();
  if (tid == 0) *out = id_of(keys[pick_sorted(prob, R, top_p, min_p, u01)]);  // sampler.cpp's code
}

// Few candidates in one block of kSampleThreads (LMFUSE_SAMPLE_TWO_PASS=0, the path measured in
// session 3): x [n] (already penalized), R = candidates (k, or 1 when greedy); the radix passes
// read x itself, one atomic per key.
__global__ void __launch_bounds__(kSampleThreads) sample_one_block_kernel(const float* x, int n, int R, float temp,
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
  bitonic_sort_desc(keys, unsigned(kSampleThreads));  // padding zeros sink to the end
  pick_from_sorted(keys, prob, R, temp, top_p, min_p, u01, out);
}

// ---- Few candidates (greedy, or k <= kSampleMaxK): two passes of radix select. ----

constexpr int kLocalThreads = 256;
// Chunk ords held in shared memory up to this size: the 48 KB a launch may take without opting
// in, less room for the kernel's static shared memory (SelectShared, ~1 KB).
constexpr size_t kLocalSmemMax = 44 * 1024;

struct SelectShared {
  unsigned hist[256];
  unsigned long long prefix;
  unsigned need, above;
  int bin, done;
};

// hist[bin] += 1 for every lane with `valid`; the whole warp calls it. Lanes with the same bin add
// together, one atomic per distinct bin: logits crowd a few top digits, and same-address shared
// atomics serialize (the cause of ~110 us per step with one atomic per key, docs/PERF.md).
__device__ __forceinline__ void hist_add(unsigned* hist, unsigned bin, bool valid) {
  const unsigned peers = __match_any_sync(0xffffffffu, valid ? bin : 0xFFFFFFFFu);
  if (valid && int(threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&hist[bin], unsigned(__popc(peers)));
}

// Warp 0: what the serial scan
//   for (b = 255; b > 0; --b) { if (above + hist[b] >= need) break; above += hist[b]; }
// finds (the bin b where the count from bin 255 down reaches need, and the count above it),
// with a warp scan: lane l sums bins 255 - 8l .. 248 - 8l, the first lane whose inclusive sum
// reaches need walks its own 8 bins like the serial loop (stopping at bin 0, as it does).
__device__ __forceinline__ void pick_bin(SelectShared& sh, unsigned need) {
  const int lane = threadIdx.x & 31;
  const int top = 255 - 8 * lane;
  unsigned local = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) local += sh.hist[top - j];
  unsigned incl = local;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  const unsigned hit = __ballot_sync(0xffffffffu, incl >= need);
  if (lane == (hit ? __ffs(hit) - 1 : 31)) {
    unsigned above = incl - local;
    int b = top;
    for (int j = 0; j < 7 && b > 0 && above + sh.hist[b] < need; ++j, --b) above += sh.hist[b];
    sh.bin = b;
    sh.above = above;
  }
}

// The R-th largest of the m keys key(0) .. key(m - 1) (at least R of them distinct and nonzero;
// zeros pad), most significant 8-bit digit first: returns lo such that exactly R keys are >= lo.
// A pass stops once the chosen bin holds exactly the keys still wanted (usually after 2-3
// passes); at the last digit a bin is one key value. Every thread of the block calls it.
template <class Key>
__device__ unsigned long long radix_select(const Key& key, int m, int R, SelectShared& sh) {
  const int tid = threadIdx.x, nt = blockDim.x;
  if (tid == 0) {
    sh.prefix = 0;
    sh.need = unsigned(R);
    sh.done = 0;
  }
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += nt) sh.hist[b] = 0;
    __syncthreads();
    const unsigned long long pre = sh.prefix;
    const int hs = shift + 8;  // the bits above this digit must equal the prefix's
    for (int base = 0; base < m; base += nt) {  // block-uniform trip count: hist_add takes whole warps
      const int i = base + tid;
      const unsigned long long k = i < m ? key(i) : 0ull;
      hist_add(sh.hist, unsigned(k >> shift) & 255u, i < m && (hs == 64 || (k >> hs) == (pre >> hs)));
    }
    __syncthreads();
    if (tid < 32) pick_bin(sh, sh.need);
    __syncthreads();
    if (tid == 0) {
      const unsigned need = sh.need, above = sh.above;
      const int b = sh.bin;
      sh.prefix = pre | (static_cast<unsigned long long>(b) << shift);
      sh.need = need - above;
      // The whole bin is wanted: every key >= prefix (low bits zero) is a candidate, and there
      // are exactly R of them.
      if (sh.hist[b] == need - above) sh.done = 1;
    }
    __syncthreads();
    if (sh.done) break;
  }
  return sh.prefix;
}

// Pass 1, block b of kLocalThreads: the R largest keys of x[b * chunk, min(n, (b + 1) * chunk))
// into cand[b * R, (b + 1) * R) in any order, zero-padded when the chunk is shorter than R. The
// R largest of all n are among these (each lies in the top R of its own chunk). SMEM: the
// chunk's ords are read once into shared memory (chunk * 4 bytes <= kLocalSmemMax), else every
// radix pass reads x again.
template <bool SMEM>
__global__ void __launch_bounds__(kLocalThreads) sample_local_kernel(const float* x, int n, int R, int chunk,
                                                                    unsigned long long* cand) {
  extern __shared__ unsigned s_ord[];
  __shared__ SelectShared sh;
  __shared__ int s_cnt;
  const int tid = threadIdx.x;
  const int base = int(int64_t(blockIdx.x) * chunk);  // < n: the launcher runs ceil(n / chunk) blocks
  const int C = min(n - base, chunk);
  unsigned long long* out = cand + size_t(blockIdx.x) * R;
  if constexpr (SMEM) {
#pragma unroll 8
    for (int j = tid; j < C; j += kLocalThreads) s_ord[j] = ord_of(__ldg(x + base + j));
    __syncthreads();
  }
  auto key = [&](int j) { return key_of_ord(SMEM ? s_ord[j] : ord_of(__ldg(x + base + j)), base + j); };
  if (C <= R) {  // the whole chunk is a candidate
    for (int j = tid; j < R; j += kLocalThreads) out[j] = j < C ? key(j) : 0ull;
    return;
  }
  if (tid == 0) s_cnt = 0;
  const unsigned long long lo = radix_select(key, C, R, sh);
  for (int j = tid; j < C; j += kLocalThreads) {
    const unsigned long long k = key(j);
    if (k >= lo) out[atomicAdd(&s_cnt, 1)] = k;  // exactly R keys
  }
}

// Pass 2, one block of kSampleThreads over the m candidate keys of pass 1 (held in shared
// memory): the R largest, sorted descending (the CPU's sorted candidate list), then the CPU
// sampler's loop by one thread. R = k, or 1 when greedy.
__global__ void __launch_bounds__(kSampleThreads) sample_final_kernel(const unsigned long long* cand, int m, int R,
                                                                     float temp, float top_p, float min_p, double u01,
                                                                     int* out) {
  extern __shared__ unsigned long long s_cand[];  // [m]
  __shared__ SelectShared sh;
  __shared__ unsigned long long keys[kSampleThreads];  // candidates, sorted descending
  __shared__ double prob[kSampleThreads];
  __shared__ int s_cnt;
  const int tid = threadIdx.x;
#pragma unroll 4
  for (int i = tid; i < m; i += kSampleThreads) s_cand[i] = __ldg(cand + i);
  if (tid == 0) s_cnt = 0;
  keys[tid] = 0;
  __syncthreads();
  const unsigned long long lo = radix_select([&](int i) { return s_cand[i]; }, m, R, sh);
  for (int i = tid; i < m; i += kSampleThreads) {
    const unsigned long long k = s_cand[i];
    if (k >= lo) keys[atomicAdd(&s_cnt, 1)] = k;  // exactly R keys (zeros pad below lo)
  }
  __syncthreads();
  unsigned S = 1;  // the first 2^ceil(log2 R) slots (zeros past R sink)
  while (S < unsigned(R)) S <<= 1;
  bitonic_sort_desc(keys, S);
  pick_from_sorted(keys, prob, R, temp, top_p, min_p, u01, out);
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

// ---- Many candidates, after the sort: the sums in chunked_sum.h's order, chunk totals in
// parallel. Chunk b holds sorted candidates [b * kSumChunk, (b + 1) * kSumChunk). ----

// 0 + v[0] + v[1] + ... + v[m - 1], left to right (one thread; v in shared memory). Loads are
// batched ahead of the dependent adds; the order of the adds is kept.
__device__ __forceinline__ double serial_sum(double s, const double* v, int m) {
  int j = 0;
  for (; j + 8 <= m; j += 8) {
    double t[8];
#pragma unroll
    for (int q = 0; q < 8; ++q) t[q] = v[j + q];
#pragma unroll
    for (int q = 0; q < 8; ++q) s = s + t[q];
  }
  for (; j < m; ++j) s = s + v[j];
  return s;
}

// Pass 1, one block of kSumChunk threads per chunk: e_i = exp((v_i - max) / T) (sampler.cpp's
// value before normalizing; max = the first sorted logit) and the chunk's total S[b].
__global__ void __launch_bounds__(kSumChunk) sample_exp_kernel(const unsigned* skey, int R, float temp, double* e,
                                                              double* S) {
  __shared__ double sv[kSumChunk];
  const int i = int(blockIdx.x) * kSumChunk + int(threadIdx.x);
  const float mx = val_of(~skey[0]);
  const double v = i < R ? exp(double(val_of(~skey[i]) - mx) / double(temp)) : 0.0;
  if (i < R) e[i] = v;
  sv[threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.x == 0) S[blockIdx.x] = serial_sum(0.0, sv, min(kSumChunk, R - int(blockIdx.x) * kSumChunk));
}

// Pass 2, same grid: sum = T over the nch chunk totals S (every block forms it, the same way);
// prob_i = e_i / sum; F[b] = the chunk's first i >= 1 with prob_i < min_p * prob_0 (R if none);
// S2[b] = the chunk's total of prob.
__global__ void __launch_bounds__(kSumChunk) sample_norm_kernel(int R, int nch, float min_p, const double* e,
                                                               const double* S, double* prob, double* S2, int* F) {
  __shared__ double sv[kSumChunk];
  __shared__ double s_sum;
  __shared__ int s_first;
  const int tid = threadIdx.x;
  double sum = 0;  // thread 0's: T_0 = 0 + S_0, T_b = T_{b-1} + S_b
  for (int t0 = 0; t0 < nch; t0 += kSumChunk) {
    sv[tid] = t0 + tid < nch ? S[t0 + tid] : 0.0;
    __syncthreads();
    if (tid == 0) sum = serial_sum(sum, sv, min(kSumChunk, nch - t0));
    __syncthreads();
  }
  if (tid == 0) {
    s_sum = sum;
    s_first = R;
  }
  __syncthreads();
  sum = s_sum;
  const int i = int(blockIdx.x) * kSumChunk + tid;
  const double pr = i < R ? e[i] / sum : 0.0;
  if (i < R) prob[i] = pr;
  if (min_p > 0 && i >= 1 && i < R && pr < double(min_p) * (e[0] / sum)) atomicMin(&s_first, i);
  sv[tid] = pr;
  __syncthreads();
  if (tid == 0) {
    F[blockIdx.x] = s_first;
    S2[blockIdx.x] = serial_sum(0.0, sv, min(kSumChunk, R - int(blockIdx.x) * kSumChunk));
  }
}

// The first i < lim whose running sum C_i of prob (chunked_sum.h) satisfies C_i >= thr (ge) or
// C_i > thr (!ge), and C_i there; or i = lim and C_{lim-1} if none. T_b (the running sum at the
// end of full chunk b) is written to Tb[b] for every full chunk passed over; with tb_known > 0 the
// first tb_known of them are read instead (binary search: T_b never decreases), so a later search
// over a prefix of an earlier one does not add the chunk totals again. Every thread of the block
// calls it with the same arguments and gets the result.
struct RunHit {
  int i;
  double c;
};
__device__ RunHit find_running(const double* prob, const double* S2, double* Tb, int lim, double thr, bool ge,
                               int tb_known, double* sv) {
  __shared__ int s_chunk, s_b0;
  __shared__ double s_base;
  __shared__ RunHit s_res;
  const int tid = threadIdx.x;
  const int full = lim / kSumChunk;  // chunks wholly inside [0, lim)
  auto hit = [&](double c) { return ge ? c >= thr : c > thr; };
  if (tid == 0) {
    s_chunk = -1;
    s_base = 0;
    s_b0 = 0;
    const int known = min(tb_known, full);
    if (known > 0) {  // the first known chunk whose T_b hits, if any
      int lo = 0, hi = known;
      while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (hit(Tb[mid]))
          hi = mid;
        else
          lo = mid + 1;
      }
      s_base = lo > 0 ? Tb[lo - 1] : 0.0;
      if (lo < known) s_chunk = lo;
      s_b0 = lo;
    }
  }
  __syncthreads();
  // Full chunks from s_b0 on, their totals through shared memory a tile at a time: thread 0 adds
  // T_b = T_{b-1} + S2[b] and stops at the first chunk whose T_b hits.
  for (int t0 = s_b0; t0 < full; t0 += kSumChunk) {
    if (s_chunk >= 0) break;  // block-uniform: read after a barrier
    const int m = min(kSumChunk, full - t0);
    sv[tid] = tid < m ? S2[t0 + tid] : 0.0;
    __syncthreads();
    if (tid == 0) {
      double base = s_base;
      for (int j = 0; j < m; ++j) {
        const double t = base + sv[j];
        Tb[t0 + j] = t;  // also for the chunk that hits: a later search may end right after it
        if (hit(t)) {
          s_chunk = t0 + j;
          break;
        }
        base = t;
      }
      s_base = base;
    }
    __syncthreads();
  }
  // Walk the chunk found, or else the partial chunk at the end of [0, lim), if there is one.
  const int b = s_chunk >= 0 ? s_chunk : full;
  const int lo = b * kSumChunk, m = min(kSumChunk, lim - lo);
  if (tid == 0) s_res = RunHit{lim, s_base};  // nothing hit: C_{lim-1} = T_{full-1} when m <= 0
  if (m > 0) {
    sv[tid] = tid < m ? prob[lo + tid] : 0.0;
    __syncthreads();
    if (tid == 0) {
      double local = 0;
      for (int j = 0; j < m; ++j) {
        local = local + sv[j];
        s_res.c = s_base + local;
        if (hit(s_res.c)) {
          s_res.i = lo + j;
          break;
        }
      }
    }
  }
  __syncthreads();
  const RunHit r = s_res;
  __syncthreads();  // s_res and sv are reused by the next call
  return r;
}

// Pass 3, one block of kSumChunk threads: min-p keep (the smallest F[b]), top-p cut, kept mass
// and the pick, all with chunked_sum.h's running sums; *out = the picked id.
__global__ void __launch_bounds__(kSumChunk) sample_pick_kernel(const int* sid, int R, int nch, float top_p,
                                                               float min_p, double u01, const double* prob,
                                                               const double* S2, const int* F, double* Tb, int* out) {
  __shared__ double sv[kSumChunk];
  __shared__ int s_keep;
  const int tid = threadIdx.x;
  if (tid == 0) s_keep = R;
  __syncthreads();
  if (min_p > 0) {
    int f = R;
    for (int b = tid; b < nch; b += kSumChunk) f = min(f, F[b]);
    atomicMin(&s_keep, f);
  }
  __syncthreads();
  const int keep_mp = s_keep;
  // top-p: the first i < keep_mp with C_i >= top_p: keep = i + 1, total = C_i. No cut (or top-p
  // off: a threshold nothing reaches): keep = keep_mp, total = C_{keep_mp - 1}.
  const double tp = top_p < 1 ? double(top_p) : double(INFINITY);
  const RunHit cut = find_running(prob, S2, Tb, keep_mp, tp, true, 0, sv);
  const int keep = cut.i < keep_mp ? cut.i + 1 : keep_mp;
  // The pick: the first i < keep with u < C_i, u = u01 * total (the running sums are the same as
  // the cut search's up to keep, so its T_b are reused); none -> keep - 1.
  const RunHit pick = find_running(prob, S2, Tb, keep, u01 * cut.c, false, keep / kSumChunk, sv);
  if (tid == 0) *out = sid[pick.i < keep ? pick.i : keep - 1];
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
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&s.e), n * sizeof(double)));
  s.n_chunks = (n_vocab + kSumChunk - 1) / kSumChunk;
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&s.chunk), 2 * size_t(s.n_chunks) * sizeof(double)));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&s.chunk_first), size_t(s.n_chunks) * sizeof(int)));
  s.sort_bytes = sort_temp_bytes(int(n_vocab));
  // Few-candidate path: pass 2 holds up to cand_cap keys (8 bytes each) in dynamic shared memory
  // beside its ~17 KB of static arrays; the largest power of two up to 16384 that fits the
  // device's opt-in limit, set once here (not in sample(), which may run under graph capture).
  int dev_id = 0, optin = 0;
  CUDA_CHECK(cudaGetDevice(&dev_id));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev_id));
  cudaFuncAttributes fa{};
  CUDA_CHECK(cudaFuncGetAttributes(&fa, dev::sample_final_kernel));
  s.cand_cap = 16384;
  while (s.cand_cap > kSampleMaxK && size_t(s.cand_cap) * 8 + fa.sharedSizeBytes > size_t(optin)) s.cand_cap /= 2;
  CUDA_CHECK(cudaFuncSetAttribute(dev::sample_final_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(size_t(s.cand_cap) * 8)));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&s.cand), size_t(s.cand_cap) * sizeof(unsigned long long)));
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
  if (s.e) CUDA_CHECK(cudaFree(s.e));
  if (s.chunk) CUDA_CHECK(cudaFree(s.chunk));
  if (s.chunk_first) CUDA_CHECK(cudaFree(s.chunk_first));
  if (s.sort_tmp) CUDA_CHECK(cudaFree(s.sort_tmp));
  if (s.cand) CUDA_CHECK(cudaFree(s.cand));
  s = SampleScratch{};
}

// The presence / frequency penalties run on the host (sample_with_uniform); the repeat penalty here.
bool sample_supported(const SamplingParams& p, int64_t n_vocab) {
  return n_vocab > 0 && n_vocab <= INT32_MAX && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f;
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
  if (!many && !sc.two_pass) {
    dev::sample_one_block_kernel<<<1, dev::kSampleThreads, 0, s>>>(src, int(n), int(R), p.temperature, p.top_p,
                                                                   p.min_p, u01, out);
    CUDA_CHECK_LAUNCH();
    return;
  }
  if (!many) {
    // Pass 1: B blocks, each the R best of its chunk (at least 256 logits per block, and B * R
    // candidates within the capacity of pass 2's shared memory); pass 2: one block over those.
    if (!sc.cand || sc.cand_cap < R) LMF_FAIL("cuda sample: no candidate scratch for k = ", R);
    const int64_t blocks0 = std::max<int64_t>(1, std::min<int64_t>(sc.cand_cap / R, (n + 255) / 256));
    const int64_t chunk = (n + blocks0 - 1) / blocks0;
    const int nb = int((n + chunk - 1) / chunk);
    const size_t ord_bytes = size_t(chunk) * sizeof(unsigned);
    if (ord_bytes <= dev::kLocalSmemMax)
      dev::sample_local_kernel<true><<<nb, dev::kLocalThreads, ord_bytes, s>>>(src, int(n), int(R), int(chunk), sc.cand);
    else
      dev::sample_local_kernel<false><<<nb, dev::kLocalThreads, 0, s>>>(src, int(n), int(R), int(chunk), sc.cand);
    CUDA_CHECK_LAUNCH();
    const int m = nb * int(R);
    dev::sample_final_kernel<<<1, dev::kSampleThreads, size_t(m) * sizeof(unsigned long long), s>>>(
        sc.cand, m, int(R), p.temperature, p.top_p, p.min_p, u01, out);
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
  const int nch = int((R + kSumChunk - 1) / kSumChunk);
  dev::sample_exp_kernel<<<nch, kSumChunk, 0, s>>>(keys_out, int(R), p.temperature, sc.e, sc.chunk);
  CUDA_CHECK_LAUNCH();
  dev::sample_norm_kernel<<<nch, kSumChunk, 0, s>>>(int(R), nch, p.min_p, sc.e, sc.chunk, sc.cum, sc.chunk + sc.n_chunks,
                                                    sc.chunk_first);
  CUDA_CHECK_LAUNCH();
  // The chunk totals of e (sc.chunk's first half) are no longer read: the pick's T_b go there.
  dev::sample_pick_kernel<<<1, kSumChunk, 0, s>>>(ids_out, int(R), nch, p.top_p, p.min_p, u01, sc.cum,
                                                  sc.chunk + sc.n_chunks, sc.chunk_first, sc.chunk, out);
  CUDA_CHECK_LAUNCH();
}

namespace {
// One block of 1024 threads per row: each thread scans a stride, keeping the largest value and
// its smallest index (NaN skipped), then a shared-memory tree with the same rule.
__global__ void argmax_rows_kernel(const float* x, int64_t n, int* out) {
  constexpr int NT = 1024;
  __shared__ float sv[NT];
  __shared__ int si[NT];
  const float* row = x + size_t(blockIdx.x) * size_t(n);
  float best = -INFINITY;
  int bi = -1;
  for (int64_t i = threadIdx.x; i < n; i += NT) {
    const float v = row[i];
    if (v > best || (bi < 0 && !(v != v))) best = v, bi = int(i);  // first non-NaN, then strictly larger
  }
  sv[threadIdx.x] = best;
  si[threadIdx.x] = bi;
  __syncthreads();
  for (int w = NT / 2; w > 0; w >>= 1) {
    if (int(threadIdx.x) < w) {
      const float ov = sv[threadIdx.x + w];
      const int oi = si[threadIdx.x + w];
      const int mi = si[threadIdx.x];
      if (oi >= 0 && (mi < 0 || ov > sv[threadIdx.x] || (ov == sv[threadIdx.x] && oi < mi)))
        sv[threadIdx.x] = ov, si[threadIdx.x] = oi;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = si[0] < 0 ? 0 : si[0];
}
}  // namespace

void argmax_rows(const float* x, int64_t rows, int64_t n, int* out, cudaStream_t s) {
  if (rows < 1 || n < 1 || rows > 65535 || n > (int64_t(1) << 31) - 1) LMF_FAIL("cuda argmax_rows: bad shape ", rows, " x ", n);
  argmax_rows_kernel<<<unsigned(rows), 1024, 0, s>>>(x, n, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace lmf::cuda
