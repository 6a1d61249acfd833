// Q4_0 and Q4_K weights repacked at load into panels of 16 rows (issue 56: "rows interleaved so
// one VNNI instruction serves several output rows, scales gathered"). The decode GEMV then keeps
// one row per 32-bit lane of a zmm register: a vpdpbusd advances 16 row dots by 4 elements each
// with no horizontal sums and no stored partial dots, and a block's 16 scales arrive in one load.
//
// Panel p holds rows 16p .. 16p + 15 (zero rows past the weight's end), block by block (Q4_0:
// blocks of 32, Q4_K: super-blocks of 256), each block the 16 rows' bytes regrouped by dword:
//   X16Q4_0:  q[k][r] = dword k of row r's qs (k < 4): low nibbles are elements 4k .. 4k + 3,
//             high nibbles 16 + 4k .. 16 + 4k + 3 (Q4_0's own nibble order); d[r] its scale
//   X16Q4_K:  q[g][s][r] = dword s of row r's 32-byte group g of qs: low nibbles are elements
//             4s .. 4s + 3 of block 2g, high nibbles those of block 2g + 1; sc[i][r] = dword i of
//             the 12 packed scale / min bytes; d[r], dmin[r]
// (Q6_K in the same form measured slower than its row-major kernel: docs/PERF.md session 49.)
// The same bytes as the file's 16 rows (288 and 2304 per block): the repacked copy replaces the
// original for the matmuls (the original's pages are left to the page cache; the embedding
// lookup still reads them). Results are bit-identical to the row-major kernels' (matmul_x86.inc
// and quant_units.h define the chains).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "format/tensor.h"

namespace lmf::cpu {

constexpr int kX16Rows = 16;

struct X16Q4_0 {
  uint32_t q[4][kX16Rows];
  uint16_t d[kX16Rows];
};
static_assert(sizeof(X16Q4_0) == 288);

struct X16Q4_K {
  uint32_t q[4][8][kX16Rows];
  uint32_t sc[3][kX16Rows];
  uint16_t d[kX16Rows];
  uint16_t dmin[kX16Rows];
};
static_assert(sizeof(X16Q4_K) == 2304);

// Below this many tokens the repacked GEMV runs; from it the prefill kernels run on rows rebuilt
// from the panels. Measured (docs/PERF.md, session 52; bench_matmul q4_0 gate_up, 1 thread, cold):
// the panel GEMV with 4-token groups beats rebuilt rows + GEMM at T = 8 (2.2-2.4x), 16 (1.4-1.6x),
// 32 and 64 (1.05-1.45x), and is even (16-bit) or ahead (8-bit) at 512.
constexpr int64_t kX16GemvMaxTokens = 65;

struct X16Weight {
  DType type = DType::F32;
  int64_t nb = 0;          // blocks (Q4_0) or super-blocks (Q4_K) per row
  size_t block_bytes = 0;  // sizeof(X16Q4_0) or sizeof(X16Q4_K)
  std::unique_ptr<uint8_t[]> bytes;
  const uint8_t* panel(int64_t p) const { return bytes.get() + size_t(p * nb) * block_bytes; }
};

// Whether w can be repacked (Q4_0 or Q4_K, with data).
bool x16_supported(const Weight& w);
X16Weight repack_x16(const Weight& w);

// Rows r0 .. r0 + n - 1 of a panel (n <= 16) back in the file's row-major layout at dst (n rows
// of row_bytes(type, cols) each): what the kernels without a repacked path read.
void unpack_x16_rows(const X16Weight& x, const uint8_t* panel, int r0, int n, uint8_t* dst);

}  // namespace lmf::cpu
