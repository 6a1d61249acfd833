// Token sampling on the device (CUDA), so a sampled decode step returns one token id instead of
// the logits. Plain C++ API (the kernels live in kernels_sampling.cu).
//
// Semantics: exactly lmf::sample_with_uniform (sampling/sampler.h) given the same logits, the
// same penalty ids and the same u01, which the host draws from the Sampler's generator:
//   penalty over pen_ids -> order by (logit desc, id asc) -> top-k -> softmax(/T) in double ->
//   min-p -> top-p -> first candidate whose running probability exceeds u01 * kept mass.
// The only possible difference is the last bit of exp() (CUDA's double exp vs the C library's),
// which changes a token only when u01 or a cut-off lands within a few ulps of a boundary (with
// ~10^5 distinct exp() arguments, sums over them may differ in their last bits; measured: u01
// placed 1-2 ulps from a running-sum boundary flipped 12 of ~1300 such draws at n = 151936,
// random u01 flipped none of 14400).
//
// Supported (sample_supported): every configuration (any vocabulary of 1..INT32_MAX ids).
//
// Few candidates (greedy, or k <= kSampleMaxK), two-pass form (SampleScratch::two_pass, knob
// LMFUSE_SAMPLE_TWO_PASS; the other form is session 3's single block of 1024 threads whose radix
// passes read all n logits, one shared atomic per key): 2 launches (+ 2 with the penalty):
//  1. If the penalty is on: copy the logits to scratch and rewrite the penalized ids there
//     (ids are distinct; the rewrite is idempotent anyway).
//  2. Every logit gets a 64-bit key that is unique and orders like the CPU sort:
//        key = ord(value) << 32 | (0xFFFFFFFF - id)
//     ord() maps float bits to an unsigned order (-0 folded into +0), so a larger key means a
//     larger logit, or an equal logit with a smaller id.
//  3. Pass 1, many blocks of 256 threads: block b takes a contiguous chunk of the logits (at
//     least 256 of them; B blocks with B * R <= cand_cap) and writes the R largest keys of its
//     chunk (all of them, zero-padded, when the chunk is shorter). The R largest of all n are
//     among these: each lies in the top R of its own chunk.
//  4. Pass 2, one block of 1024 threads over those B * R keys in shared memory: radix select of
//     the R-th largest key (R = k, or 1 when greedy), 8 bits per pass from the top; it stops as
//     soon as the chosen bin holds exactly the missing count (usually after 2-3 passes), leaving
//     a lower bound `lo` such that exactly R keys are >= lo. Pass 1 selects the same way within
//     its chunk. Histogram increments are aggregated per warp (one shared atomic per distinct
//     bin) and the bin is found by a warp scan.
//  5. Gather those R keys, bitonic-sort them descending: this is the CPU's sorted candidate list.
//  6. exp((v - max) / T) in double per candidate (in parallel), then one thread runs the CPU
//     loop verbatim in the same order: sum, normalize, min-p cut, top-p cut, kept mass, pick.
//
// Many candidates (k = 0, or k > kSampleMaxK; R = min(k, n) or n): 5 launches (+ penalty):
//  1. keys[i] = ~ord(x[i]); cub's stable radix sort of (keys, ids 0..n-1) ascending = the CPU's
//     (logit desc, id asc) order of all n (partial_sort's first k are the same k).
//  2. The sampler's sums run in sampling/chunked_sum.h's order (left to right within chunks of
//     256 sorted candidates, then over the chunk totals), so they split into parallel work with
//     the CPU's roundings, and the exp() / division per candidate are the CPU's expressions:
//     a. one block per chunk: e_i = exp((v_i - max) / T), and the chunk's total of e;
//     b. one block per chunk: sum = the chunk totals left to right (each block forms it),
//        prob_i = e_i / sum, the chunk's first index failing min-p, the chunk's total of prob;
//     c. one block: min-p keep = the smallest first failing index; the top-p cut = the first
//        running sum >= top_p (chunk totals added left to right, then a walk inside the chunk
//        that crosses); kept mass = the running sum there; the pick = the first running sum
//        > u01 * kept mass (binary search over the chunk-end sums of the cut search, then a
//        walk inside one chunk).
// No allocation, no host sync in the launcher (graph-capture safe, tested); the scratch needs
// no reset between launches.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "sampling/sampler.h"

namespace lmf::cuda {

constexpr int kSampleMaxK = 1024;

struct SampleScratch {
  int64_t n = 0;             // vocabulary the scratch was sized for
  float* vals = nullptr;     // device [n]: penalized logits
  int* pen_ids = nullptr;    // device [n]
  int* h_pen_ids = nullptr;  // pinned host [n], staging for upload_penalty_ids
  // Many candidates (k = 0 or k > kSampleMaxK): the full sort and the running sums.
  unsigned* keys = nullptr;  // device [2n]: sort keys in [0, n), sorted keys in [n, 2n)
  int* ids = nullptr;        // device [2n]: 0..n-1 in [0, n) (written once), sorted ids in [n, 2n)
  double* cum = nullptr;     // device [n]: the probabilities in sorted order
  double* e = nullptr;       // device [n]: exp((v - max) / T) in sorted order
  // Per chunk of kSumChunk sorted candidates (sampling/chunked_sum.h): the totals of e, then
  // the running sums T_b at chunk ends ([n_chunks]); the totals of the probabilities
  // ([n_chunks]); each chunk's first index failing min-p.
  double* chunk = nullptr;   // device [2 * n_chunks]
  int* chunk_first = nullptr;  // device [n_chunks]
  int64_t n_chunks = 0;
  void* sort_tmp = nullptr;  // device [sort_bytes]: cub radix sort scratch
  size_t sort_bytes = 0;
  // Few candidates (k <= kSampleMaxK or greedy): the two-pass form (knob sample_two_pass; else
  // the one-block kernel), and pass 1's per-block candidates for pass 2.
  bool two_pass = false;
  unsigned long long* cand = nullptr;  // device [cand_cap]
  int64_t cand_cap = 0;                // >= kSampleMaxK
};
SampleScratch sample_scratch_alloc(int64_t n_vocab);
void sample_scratch_free(SampleScratch& s);

bool sample_supported(const SamplingParams& p, int64_t n_vocab);

// Copies ids (distinct, in [0, n)) to sc.pen_ids through the pinned staging buffer (the caller
// must not call again before the previous copy finished, e.g. one call per synchronized step).
// Returns the count to pass to sample().
int upload_penalty_ids(const int32_t* ids, int64_t n_ids, SampleScratch& sc, cudaStream_t s = nullptr);

// *out = sample_with_uniform(p, x[0..n), pen_ids[0..n_pen), u01). x is device memory; out is a
// device int. Fails (lmf::Error) when !sample_supported(p, n) or n > sc.n.
void sample(const float* x, int64_t n, const SamplingParams& p, const int* pen_ids, int n_pen, double u01,
            int* out, const SampleScratch& sc, cudaStream_t s = nullptr);

}  // namespace lmf::cuda
