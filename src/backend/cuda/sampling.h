// Token sampling on the device (CUDA), so a sampled decode step returns one token id instead of
// the logits. Plain C++ API (the kernels live in kernels_sampling.cu).
//
// Semantics: exactly lmf::sample_with_uniform (sampling/sampler.h) given the same logits, the
// same penalty ids and the same u01, which the host draws from the Sampler's generator:
//   penalty over pen_ids -> order by (logit desc, id asc) -> top-k -> softmax(/T) in double ->
//   min-p -> top-p -> first candidate whose running probability exceeds u01 * kept mass.
// The only possible difference is the last bit of exp() (CUDA's double exp vs the C library's),
// which changes a token only when u01 or a cut-off lands within ~1e-16 of a boundary.
//
// Supported (sample_supported): greedy (temperature <= 0, penalty allowed), or top-k active with
// k <= kSampleMaxK (top_k = 0 counts as k = n_vocab, so a vocabulary of <= kSampleMaxK ids works
// without top-k). Other configurations sample on the host.
//
// Algorithm (one block of 1024 threads for the selection; the whole step is 1-3 launches):
//  1. If the penalty is on: copy the logits to scratch and rewrite the penalized ids there
//     (ids are distinct; the rewrite is idempotent anyway).
//  2. Every logit gets a 64-bit key that is unique and orders like the CPU sort:
//        key = ord(value) << 32 | (0xFFFFFFFF - id)
//     ord() maps float bits to an unsigned order (-0 folded into +0), so a larger key means a
//     larger logit, or an equal logit with a smaller id.
//  3. Radix select of the R-th largest key (R = k, or 1 when greedy), 8 bits per pass from the
//     top, shared-memory histograms; it stops as soon as the chosen bin holds exactly the
//     missing count (usually after 2-3 passes over the logits), leaving a lower bound `lo`
//     such that exactly R keys are >= lo.
//  4. Gather those R keys into shared memory, bitonic-sort them descending: this is the CPU's
//     sorted candidate list.
//  5. exp((v - max) / T) in double per candidate (in parallel), then one thread runs the CPU
//     loop verbatim in the same order: sum, normalize, min-p cut, top-p cut, kept mass, pick.
// No allocation, no host sync in the launcher; the scratch needs no reset between launches.
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
