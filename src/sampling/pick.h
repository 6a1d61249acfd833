// The sampler's arithmetic after the exp() values of the k sorted candidates (sampling/sampler.h):
// e[i] = exp((logit_i - max) / T) becomes the probabilities, in place (normalized by their
// sum); min-p drops from the first i >= 1 with prob_i < min_p * prob_0; top-p keeps up to the
// first running sum >= top_p; the kept mass is the sum of what is kept; every sum in ChunkedSum's
// order (sampling/chunked_sum.h);
// the pick is the first candidate whose running sum exceeds u01 * kept mass (the last kept one if
// none). Returns its index. The CPU sampler and the CUDA sampler's single thread (k <= 1024,
// backend/cuda/kernels_sampling.cu) both run this code; the CUDA many-candidate path forms the
// same sums in parallel.
#pragma once
#include "sampling/chunked_sum.h"
#include "util/host_device.h"

namespace lmf {

LMF_HOST_DEVICE inline long long pick_sorted(double* e, long long k, float top_p, float min_p, double u01) {
  ChunkedSum norm;
  double sum = 0;
  for (long long i = 0; i < k; ++i) sum = norm.add(e[i]);
  for (long long i = 0; i < k; ++i) e[i] /= sum;
  long long keep = k;
  if (min_p > 0)
    for (long long i = 1; i < k; ++i)
      if (e[i] < min_p * e[0]) {
        keep = i;
        break;
      }
  if (top_p < 1) {
    ChunkedSum c;
    for (long long i = 0; i < keep; ++i)
      if (c.add(e[i]) >= top_p) {
        keep = i + 1;
        break;
      }
  }
  ChunkedSum kept;
  double total = 0;
  for (long long i = 0; i < keep; ++i) total = kept.add(e[i]);
  // u01 has 53 random bits so the result does not depend on the library's distributions.
  const double u = u01 * total;
  ChunkedSum c;
  for (long long i = 0; i < keep; ++i)
    if (u < c.add(e[i])) return i;
  return keep - 1;
}

}  // namespace lmf
