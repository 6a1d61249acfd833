// The decode GEMV's grid arithmetic (backend/cuda/gemv_grid.h) on the H200's 132 SMs and the
// three benchmark models' shapes: the blocks of each launch, and the spare-SM ceiling lowered to
// keep the rounds through the row groups, at the bounds the S34-3/S34-4 sweeps found on the GPU
// (4B gate/up 30 -> 31 and 8B 4 -> 8 spare SMs added a round and lost 2-4 %; 0.6B 36 -> 37).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/gemv_grid.h"

namespace lmf::cuda {
namespace {

constexpr int kH200 = 132;

// rg_batches as gemv_launch.cuh computes it for the 4-bit types (two steps of 32 blocks a batch).
constexpr int batches_q4(int cols) { return ((cols / 32 + 31) / 32 + 1) / 2; }

GemvGridShape shape(int rows, int cols, int warps, int occ) {
  GemvGridShape g;
  g.sms = kH200;
  g.occ = occ;
  g.warps = warps;
  g.row_groups = (rows + 3) / 4;
  g.rg_batches = batches_q4(cols);
  return g;
}

TEST(GemvGrid, WideGateUpKeepsItsRounds) {
  const GemvGridShape g8 = shape(2 * 12288, 4096, 16, 1);  // 8B gate/up, one 16-warp block per SM
  EXPECT_EQ(gemv_grid_blocks(g8, 0), kH200);
  EXPECT_EQ(gemv_grid_rounds(g8, 0), 3);
  EXPECT_EQ(gemv_grid_rounds(g8, 4), 3);
  EXPECT_EQ(gemv_grid_rounds(g8, 5), 4);
  EXPECT_EQ(gemv_spare_same_rounds(g8, kH200 / 6), 4);
  const GemvGridShape g4 = shape(2 * 9728, 2560, 16, 1);  // 4B gate/up
  EXPECT_EQ(gemv_spare_same_rounds(g4, kH200 / 6), kH200 / 6);
  EXPECT_EQ(gemv_spare_same_rounds(g4, 33), 30);
  EXPECT_EQ(gemv_grid_rounds(g4, 31), 4);
  EXPECT_EQ(gemv_grid_blocks(g4, 22), kH200 - 22);
}

// 0.6B gate/up (1,024 columns) runs the compact-stage instance: 80 registers, three 8-warp
// blocks per SM, so gateup_room's narrow ceiling (half the SMs) keeps its one round. With two
// per SM (a 128-register instance) the ceiling would come down to 36.
TEST(GemvGrid, NarrowGateUpKeepsOneRound) {
  const GemvGridShape g = shape(2 * 3072, 1024, 8, 3);
  EXPECT_EQ(gemv_grid_blocks(g, 0), 3 * kH200);
  EXPECT_EQ(gemv_grid_rounds(g, 0), 1);
  EXPECT_EQ(gemv_spare_same_rounds(g, kH200 / 2), kH200 / 2);
  EXPECT_EQ(gemv_grid_blocks(g, kH200 / 2), 3 * 66);
  const GemvGridShape g2 = shape(2 * 3072, 1024, 8, 2);
  EXPECT_EQ(gemv_spare_same_rounds(g2, kH200 / 2), 36);
  EXPECT_EQ(gemv_grid_blocks(g2, 36), 2 * 96);
  EXPECT_EQ(gemv_grid_rounds(g2, 37), 2);
}

TEST(GemvGrid, ShortShapesOneBlockPerSm) {
  const GemvGridShape o = shape(1024, 2048, 8, 2);  // 0.6B o_proj: coresident, one block per SM
  EXPECT_EQ(gemv_grid_blocks(o, 0), kH200);
  EXPECT_EQ(gemv_grid_blocks(o, kH200 * 2 / 3), 44);  // o_room's narrow rule
  GemvGridShape forced = o;
  forced.coresident = Tri::Off;  // every resident block, up to one per row group
  EXPECT_EQ(gemv_grid_blocks(forced, 0), 256);
  const GemvGridShape o4 = shape(2560, 4096, 16, 1);  // 4B o_proj, wide; o_room leaves 32 SMs
  EXPECT_EQ(gemv_grid_blocks(o4, 32), 100);
}

TEST(GemvGrid, CeilingEdges) {
  const GemvGridShape g = shape(2 * 12288, 4096, 16, 1);
  EXPECT_EQ(gemv_spare_same_rounds(g, 0), 0);
  // A tiny matrix: 24 row groups, one block per SM while its warps hold them all; on the last
  // SM (131 spare) one per SM no longer fits and it takes its two resident blocks: 16 warps, a
  // second round; 130 spare leave 2 SMs x 2 blocks, one round.
  const GemvGridShape t = shape(96, 64, 8, 2);
  EXPECT_EQ(gemv_grid_blocks(t, 0), 24);
  EXPECT_EQ(gemv_grid_blocks(t, kH200 - 1), 2);
  EXPECT_EQ(gemv_grid_rounds(t, kH200 - 1), 2);
  EXPECT_EQ(gemv_spare_same_rounds(t, kH200 - 1), kH200 - 2);
}

// down_fit: 0.6B down (256 row groups, two batches each) runs one block per SM on 37 of the 66
// SMs gate/up leaves free (ceil(256 / 7): a warp per block to spare); 4B/8B down (deep rows:
// five / seven batches) and a too-small set of SMs keep the grid they would have.
TEST(GemvGrid, DownFitsOnGateUpsFreeSms) {
  const GemvGridShape d = shape(1024, 3072, 8, 2);  // 0.6B down
  EXPECT_EQ(gemv_fit_spare(d, 66), kH200 - 37);
  const GemvGrid fit = gemv_grid_plan(d, 0, false, 66);
  EXPECT_EQ(fit.blocks, 37);
  EXPECT_EQ(fit.spare, kH200 - 37);
  EXPECT_EQ(gemv_grid_rounds(d, fit.spare), 1);
  EXPECT_EQ(gemv_fit_spare(d, 36), -1);  // 37 needed
  EXPECT_EQ(gemv_fit_spare(d, 37), kH200 - 37);
  EXPECT_EQ(gemv_fit_spare(d, 0), -1);
  EXPECT_EQ(gemv_fit_spare(d, kH200), -1);
  const GemvGrid none = gemv_grid_plan(d, 0, false, 0);  // the default: one per SM on every SM
  EXPECT_EQ(none.blocks, kH200);
  EXPECT_EQ(none.spare, 0);
  const GemvGridShape d4 = shape(2560, 9728, 16, 1);  // 4B down, gate/up leaves 22 SMs
  EXPECT_EQ(gemv_fit_spare(d4, 22), -1);
  const GemvGrid keep = gemv_grid_plan(d4, 0, false, 22);
  EXPECT_EQ(keep.blocks, kH200);
  EXPECT_EQ(keep.spare, 0);
  // Without a fit, the spare ceiling is lowered as before and reported as resolved.
  const GemvGrid gu = gemv_grid_plan(shape(2 * 3072, 1024, 8, 2), kH200 / 2, true, 0);
  EXPECT_EQ(gu.spare, 36);
  EXPECT_EQ(gu.blocks, 2 * 96);
}

// Warps per row group (gemv_ksplit_rule) for the Q4_0 down_proj shapes: two 8-warp blocks of slots
// per SM, two column groups of 32 blocks per batch. 3 only in a wide grid that takes every row
// group in one round, where 2 would leave a batch after the PDL wait (4B down: 5 batches).
TEST(GemvGrid, SplitKWarpsPerRowGroup) {
  auto k = [](int rows, int cols, int wide3_blocks, int steps = 2) {
    return gemv_ksplit_rule((rows + 3) / 4, (cols / 32 + 31) / 32, steps, kH200, 16, wide3_blocks);
  };
  EXPECT_EQ(k(4096, 12288, 0), 2);       // 8B down: 2,048 warps of 2,112; 4 would take a second round
  EXPECT_EQ(k(4096, 12288, kH200), 2);   // 3 x 1,024 row groups > 5 x 132
  EXPECT_EQ(k(2560, 9728, 0), 2);        // 4B down, narrow (or split3 off): 3 batches for the first warp
  EXPECT_EQ(k(2560, 9728, kH200), 3);    // wide: 640 row groups <= 660 slots of 3 warps, 2 batches each
  EXPECT_EQ(k(2560, 9728, 127), 2);      // a grid with spare SMs would need a second round
  EXPECT_EQ(k(2560, 9728, 128), 3);
  EXPECT_EQ(k(2560, 9728, kH200, 1), 2); // Q8_0 (one group a batch): 10 batches, 3 warps leave 4
  EXPECT_EQ(k(2048, 6144, kH200), 2);    // Qwen3 1.7B down: 2 warps already load all before the wait
  EXPECT_EQ(k(2048, 8192, kH200), 4);    // Llama 3.2 1B down: 2,048 warps, one batch each
  EXPECT_EQ(k(4096, 4096, kH200), 2);    // 8B o_proj (split only when forced): 2 batches, never 3
  EXPECT_EQ(k(1024, 3072, kH200), 2);    // 0.6B down (split only when forced): 2 batches, never 3
}

// Row groups dealt in runs of 16 (gemv_run_row_group, the SiluMulQ producer): over the slots of
// every block of the grid (slot s takes k = s, s + slots, ...; 16 warps, 8, or fewer slots when
// warps share a row group), every row group is taken exactly once, by the block whose run it is,
// and each slot's sequence rises, so a slot is done at its first row group past the end.
TEST(GemvGrid, RunsOfSixteenCoverEveryRowGroupOnce) {
  struct Case {
    int n_rg, grid, slots;
  };
  for (const Case c : {Case{6144, 128, 16}, Case{6144, 132, 16}, Case{4864, 110, 16}, Case{1536, 396, 8},
                       Case{16, 132, 16}, Case{768, 264, 4}, Case{3072, 132, 5}, Case{192, 7, 1}}) {
    std::vector<int> taken(size_t(c.n_rg), 0);
    bool own = true, rising = true;
    for (int b = 0; b < c.grid; ++b)
      for (int s = 0; s < c.slots; ++s) {
        int prev = -1;
        for (int k = s;; k += c.slots) {
          const int rg = gemv_run_row_group(b, c.grid, 16, k);
          if (rg >= c.n_rg) break;
          rising = rising && rg > prev;
          prev = rg;
          ++taken[size_t(rg)];
          own = own && (rg / 16) % c.grid == b;
        }
      }
    int64_t once = 0;
    for (int t : taken) once += t == 1;
    EXPECT_EQ(once, int64_t(c.n_rg)) << c.n_rg << " row groups, grid " << c.grid << ", slots " << c.slots;
    EXPECT_TRUE(own && rising) << c.n_rg << " row groups, grid " << c.grid << ", slots " << c.slots;
  }
}

}  // namespace
}  // namespace lmf::cuda
