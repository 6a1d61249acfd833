// Exact re-encodings of GGUF rows into another GGUF type that holds the same values, for a
// backend that runs the target type but not the source (CUDA: quant_transcode_target at load).
//   Q3_K   -> Q6_K: x = (d * (sc - 32)) * q, q in [-4, 3], is Q6_K's (d * s) * q with s = sc - 32
//             and the same q (6.56 bits per weight instead of 3.44).
//   IQ4_NL -> Q8_0: x = d * kIQ4Values[q] is Q8_0's d * qs with qs = kIQ4Values[q] (8.5 bits
//             instead of 4.5).
//   Q5_0   -> Q8_0: x = d * (q - 16), qs = q - 16 (8.5 bits instead of 5.5).
// Every value decodes to the same float, bit for bit (quant_transcode_test checks it against
// dequantize_row on every code and scale pattern).
#pragma once
#include <cstdint>

#include "format/quant/types.h"

namespace lmf {

// The type `t` is re-encoded into, or t itself when it has no exact re-encoding here.
DType quant_transcode_target(DType t);
// One row of `cols` elements of type `from` (cols a multiple of from's block) into
// quant_transcode_target(from): row_bytes(target, cols) bytes at dst.
void quant_transcode_row(DType from, const void* src, int64_t cols, void* dst);

}  // namespace lmf
