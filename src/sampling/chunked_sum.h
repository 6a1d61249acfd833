// The order of the sampler's sums (sampling/sampler.h): over the candidates in sorted order, in
// two levels. Inside each chunk of kSumChunk consecutive candidates the values are added left
// to right starting from 0 (the chunk total S_b); the chunk totals are added left to right
// (T_b = T_{b-1} + S_b, T_{-1} = 0); the running sum at candidate i of chunk b is
// T_{b-1} + (left-to-right sum of chunk b up to i). With at most kSumChunk candidates this is the
// plain left-to-right sum, and the running sums never decrease (non-negative terms, round to
// nearest). A GPU forms every chunk total in parallel and the T_b in one short serial pass, with
// the same roundings as this serial form, so device sampling gives the CPU's ids
// (backend/cuda/sampling.h) without a serial pass over the whole vocabulary.
#pragma once
#include "util/host_device.h"

namespace lmf {

constexpr int kSumChunk = 256;

// Feed the values in candidate order; add() returns the running sum after each one.
struct ChunkedSum {
  double base = 0;   // T_{b-1}: the totals of the chunks before the current one
  double local = 0;  // the current chunk's left-to-right sum so far
  long long n = 0;   // values added

  LMF_HOST_DEVICE double add(double v) {
    if (n > 0 && n % kSumChunk == 0) {  // a new chunk starts: T_b = T_{b-1} + S_b
      base = base + local;
      local = 0;
    }
    local = local + v;
    ++n;
    return base + local;
  }
};

}  // namespace lmf
