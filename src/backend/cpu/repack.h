// Q4_0 weights repacked at load into panels of 16 rows (issue 56: "rows interleaved so one VNNI
// instruction serves several output rows, scales gathered"). The decode GEMV then keeps one row
// per 32-bit lane of a zmm register: a vpdpbusd advances 16 row dots by 4 elements each with no
// horizontal sums and no stored partial dots, and the block's 16 scales arrive in one load.
//
// Panel p holds rows 16p .. 16p + 15 (zero rows past the weight's end), block by block:
//   q[k][r] = bytes 4k .. 4k + 3 of row r's qs (k < 4): low nibbles are elements 4k .. 4k + 3,
//             high nibbles elements 16 + 4k .. 16 + 4k + 3 (Q4_0's own nibble order)
//   d[r]    = row r's fp16 scale
// 288 bytes per block, the same as 16 BlockQ4_0: the repacked copy replaces the original for the
// matmuls (the original's pages are left to the page cache; the embedding lookup still reads it).
// Results are bit-identical to the row-major kernels (the canonical chain of matmul_x86.inc).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "format/tensor.h"

namespace lmf::cpu {

constexpr int kX16Rows = 16;

struct X16Block {
  uint32_t q[4][kX16Rows];
  uint16_t d[kX16Rows];
};
static_assert(sizeof(X16Block) == 288);

// Below this many tokens the repacked GEMV runs; from it the packed GEMM of matmul_x86.inc
// (which repacks 16 rows per call anyway) runs on rows rebuilt from the panels.
constexpr int64_t kX16GemvMaxTokens = 8;

struct X16Weight {
  std::unique_ptr<X16Block[]> blocks;  // [n_panels * nb]
  int64_t nb = 0;                      // blocks per row
  const X16Block* panel(int64_t p) const { return blocks.get() + p * nb; }
};

// Whether w can be repacked (Q4_0; any row count, cols a multiple of 32).
bool x16_supported(const Weight& w);
X16Weight repack_x16(const Weight& w);

// Rows [r0, r0 + n) of panel `p` (n <= 16) back in Q4_0's row-major layout at dst (n rows of
// nb * 18 bytes): what the kernels without a repacked path read.
void unpack_x16_rows(const X16Block* panel, int64_t nb, int r0, int n, uint8_t* dst);

}  // namespace lmf::cpu
