// The decode GEMV's grid arithmetic (pure C++, no CUDA headers: the CPU unit tests check it).
// kernels_gemv.cu's gemv_grid supplies the device's SM count and the instance's occupancy.
#pragma once
#include <algorithm>

#include "util/host_device.h"
#include "util/tri.h"

namespace lmf::cuda {

struct GemvGridShape {
  int sms = 0;         // the device's SMs
  int occ = 1;         // blocks of the instance resident per SM (cudaOccupancy..., >= 1)
  int warps = 8;       // warps per block
  int row_groups = 0;  // ceil(rows / kRows)
  int rg_batches = 1;  // column batches per row group
  Tri coresident = Tri::Auto;
};

// Blocks for a launch with `spare` SMs left free: one per row group up to what is resident at
// once (row groups are dealt round-robin over blocks, so every SM gets an equal share and small
// matrices still spread over all SMs; warps of a block without a row group only help stage x).
// One block per SM instead (coresident On) leaves room for the next PDL kernel's block. Measured
// (docs/PERF.md, session 5): one per SM for every GEMV is slower end to end (gate/up and down
// lose half their loads in flight) but faster in isolation for the short shapes, those where one
// block per SM still gives every row group its own warp and a warp's whole row group is in the
// batches it loads before the PDL wait (rg_batches <= 2 column batches per row group: 8B and 4B
// o_proj; 0.6B qkv, o, down). Automatic = one per SM for exactly those (session 6: +1.7 % on 8B,
// +2.7 % on 4B end to end). Also counting two one-batch row groups per warp as short (0.6B
// gate/up) measured 0.96 on 0.6B tg128 (S16-1/S16-2).
constexpr int gemv_grid_blocks(const GemvGridShape& g, int spare) {
  const int sms = g.sms - spare;
  const bool fits = g.rg_batches <= 2 && g.row_groups <= sms * g.warps;
  const bool one = g.coresident == Tri::Auto ? fits : g.coresident == Tri::On;
  const int per_sm = one ? 1 : std::max(1, g.occ);
  return std::max(1, std::min(g.row_groups, sms * per_sm));
}

// Rounds the grid's warps take through the row groups: ceil(row groups / warps on the grid).
constexpr int gemv_grid_rounds(const GemvGridShape& g, int spare) {
  const int warps = gemv_grid_blocks(g, spare) * g.warps;
  return (g.row_groups + warps - 1) / warps;
}

// The most SMs, up to `ceiling`, a grid may leave free without adding a round
// (GemvArgs::spare_same_rounds): a fourth round on 8B gate/up costs 4 % (docs/PERF.md S34-3).
constexpr int gemv_spare_same_rounds(const GemvGridShape& g, int ceiling) {
  int spare = ceiling;
  while (spare > 0 && gemv_grid_rounds(g, spare) > gemv_grid_rounds(g, 0)) --spare;
  return spare;
}

// The SMs a grid leaves free when it runs one block per SM on at most `fit_sms` SMs
// (GemvArgs::fit_sms): on the fewest SMs whose blocks take every row group in one round with a
// warp per block to spare (a grid with no idle warp waits on its slowest row group: 0.6B down at
// 32 blocks 0.4 % below 36-40, o_proj's at 32 bimodal, docs/PERF.md S34-6, S35-2), each warp's
// whole row group in the batches it loads before the PDL wait (rg_batches <= 2, gemv_grid_blocks'
// one-per-SM shape); -1 = no fit.
constexpr int gemv_fit_spare(const GemvGridShape& g, int fit_sms) {
  if (fit_sms <= 0 || fit_sms >= g.sms || g.warps < 2 || g.rg_batches > 2) return -1;
  const int need = (g.row_groups + g.warps - 2) / (g.warps - 1);
  return need <= fit_sms ? g.sms - need : -1;
}

// Warps per row group (in-block split-K, gemv.cuh) for a shape of `row_groups` row groups of
// `ngroups` column groups (32 blocks each), `steps` groups per column batch, on `sms` SMs of
// `slots_per_sm` warp slots of the narrow block. Doubles k while the doubled count of working warps
// still fits the slots in one round and every warp of the group still gets at least one column
// batch. The slots are the narrow block's for every width, so both widths sum a shape in the same
// order, except in a grid of `wide3_blocks` 16-warp blocks (0: none; five groups of 3 warps each):
// 3 warps per row group where 2 would leave each first warp a batch to load after the PDL wait
// (more than two batches: two are loaded before it) and 3 load every batch before it, in one round
// (4B down: 640 row groups of 5 batches; docs/PERF.md S43-2).
constexpr int gemv_ksplit_rule(int row_groups, int ngroups, int steps, int sms, int slots_per_sm, int wide3_blocks) {
  const long slots = long(sms) * slots_per_sm;
  int k = 1;
  while (k < 8 && long(row_groups) * 2 * k <= slots && (2 * k - 1) * steps < ngroups) k *= 2;
  const int batches = (ngroups + steps - 1) / steps;
  if (k == 2 && (batches + 1) / 2 > 2 && (batches + 2) / 3 <= 2 && long(row_groups) <= long(wide3_blocks) * 5) k = 3;
  return k;
}

// The row group a block takes as its k-th (k = 0, 1, ...) when row groups are dealt in runs of
// `run` (gemv.cuh, Epilogue::SiluMulQ: one run is the 32 outputs of one code block of y): block b
// of a grid of g blocks takes runs b, b + g, b + 2g, ..., each whole and in order, so over k the
// blocks take every row group once and each run inside one block (unit-tested).
LMF_HOST_DEVICE constexpr int gemv_run_row_group(int block, int grid, int run, int k) {
  return (block + grid * (k / run)) * run + k % run;
}

struct GemvGrid {
  int blocks = 1;
  int spare = 0;  // SMs left free
};
// A launch's grid: on `fit_sms` SMs where the shape fits there (gemv_fit_spare), else with
// `spare` SMs free, lowered to keep the rounds when `same_rounds`.
constexpr GemvGrid gemv_grid_plan(GemvGridShape g, int spare, bool same_rounds, int fit_sms) {
  if (const int f = gemv_fit_spare(g, fit_sms); f >= 0) {
    g.coresident = Tri::On;
    spare = f;
  } else if (same_rounds) {
    spare = gemv_spare_same_rounds(g, spare);
  }
  return {gemv_grid_blocks(g, spare), spare};
}

}  // namespace lmf::cuda
