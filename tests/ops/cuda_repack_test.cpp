// Host-side repacks (kernels.h). The 16-byte tiled layout: a concatenation and a gate/up
// interleave equal the single-matrix repacks of their rows, put together row by row. The per-SM
// tiles (repack_tiles_*): every GGUF Q4_0 block lands at the byte the layout documents, for
// concatenated parts and for interleaved gate/up rows, and shapes off the tile grid or other
// types are refused. The load's parallel repack (a ThreadPool) gives the same bytes as one thread.
// Host only (no device needed).
#include <algorithm>
#include <cstring>

#include "cuda_test.h"
#include "cuda_test_util.h"
#include "backend/backend.h"
#include "util/threadpool.h"

using namespace lmfct_cuda;
using namespace lmf::cuda;

namespace {

// Whether block c of output row `row` in tiles h holds GGUF block `blk` (nibbles and scale).
bool tile_block_is(const HostTiles& h, int64_t row, int64_t c, const BlockQ4_0& blk) {
  const int64_t tiles_per_group = h.cols / (kTileBlocks * QK);
  const uint8_t* tile = h.bytes.data() + size_t((row / kTileRows) * tiles_per_group + c / kTileBlocks) * kTileBytes;
  const int64_t slot = (c % kTileBlocks) * kTileRows + row % kTileRows;
  uint16_t d;
  std::memcpy(&d, tile + kTileQBytes + slot * 2, 2);
  return std::memcmp(tile + slot * 16, blk.qs, 16) == 0 && d == blk.d;
}

const BlockQ4_0& gguf_block(const std::vector<uint8_t>& rows, int64_t cols, int64_t r, int64_t c) {
  return reinterpret_cast<const BlockQ4_0*>(rows.data() + row_bytes(DType::Q4_0, cols) * r)[c];
}

}  // namespace

TEST(CudaRepackTiles, ConcatPlacesEveryBlock) {
  std::mt19937 rng(7);
  const int64_t cols = 384;  // 12 blocks: 3 tiles per row group
  auto a = random_rows(DType::Q4_0, 64, cols, rng), b = random_rows(DType::Q4_0, 32, cols, rng);
  const HostTiles h = repack_tiles_concat(DType::Q4_0, {RowsRef{a.data(), 64}, RowsRef{b.data(), 32}}, cols);
  ASSERT_TRUE(h.rows == 96 && h.cols == cols);
  EXPECT_EQ(h.bytes.size(), size_t(3) * 3 * kTileBytes);
  int bad = 0;
  for (int64_t r = 0; r < 96; ++r)
    for (int64_t c = 0; c < cols / QK; ++c)
      bad += !tile_block_is(h, r, c, r < 64 ? gguf_block(a, cols, r, c) : gguf_block(b, cols, r - 64, c));
  EXPECT_EQ(bad, 0);
}

TEST(CudaRepackTiles, GateUpInterleavesRows) {
  std::mt19937 rng(11);
  const int64_t rows = 48, cols = 256;  // 96 output rows: 3 row groups of 32
  auto g = random_rows(DType::Q4_0, rows, cols, rng), u = random_rows(DType::Q4_0, rows, cols, rng);
  const HostTiles h = repack_tiles_gate_up(DType::Q4_0, g.data(), u.data(), rows, cols);
  ASSERT_TRUE(h.rows == 2 * rows && h.cols == cols);
  int bad = 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < cols / QK; ++c) {
      bad += !tile_block_is(h, 2 * i, c, gguf_block(g, cols, i, c));
      bad += !tile_block_is(h, 2 * i + 1, c, gguf_block(u, cols, i, c));
    }
  EXPECT_EQ(bad, 0);
}

TEST(CudaRepackTiles, RefusesShapesOffTheGridAndOtherTypes) {
  std::mt19937 rng(3);
  auto q4 = random_rows(DType::Q4_0, 64, 256, rng);
  auto q8 = random_rows(DType::Q8_0, 32, 128, rng);
  EXPECT_TRUE(throws_error([&] { repack_tiles_concat(DType::Q8_0, {RowsRef{q8.data(), 32}}, 128); }))
      << "Q8_0 accepted";
  EXPECT_TRUE(throws_error([&] { repack_tiles_concat(DType::Q4_0, {RowsRef{q4.data(), 48}}, 256); }))
      << "48 rows accepted";
  EXPECT_TRUE(throws_error([&] { repack_tiles_concat(DType::Q4_0, {RowsRef{q4.data(), 32}}, 96); }))
      << "96 columns accepted";
  EXPECT_TRUE(throws_error([&] { repack_tiles_gate_up(DType::Q4_0, q4.data(), q4.data(), 8, 256); }))
      << "16 gate/up rows accepted";
}

TEST(CudaRepack, ConcatAndGateUpAreTheirRowsRepacked) {
  std::mt19937 rng(5);
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::F16, DType::BF16}) {
    const int64_t cols = 96;  // three blocks: a partial group of 32
    auto a = random_rows(t, 3, cols, rng), b = random_rows(t, 2, cols, rng);
    const HostPacked cat = repack_concat(t, {RowsRef{a.data(), 3}, RowsRef{b.data(), 2}}, cols);
    const HostPacked gu = repack_gate_up(t, a.data(), b.data(), 2, cols);
    const size_t rb = row_bytes(t, cols);
    const HostPacked one = repack_rows(t, a.data(), 1, cols);
    const size_t qs = one.q.size(), ss = one.scales.size();  // bytes per packed row
    ASSERT_TRUE(cat.q.size() == 5 * qs && cat.scales.size() == 5 * ss && gu.q.size() == 4 * qs);
    auto same_row = [&](const HostPacked& h, int64_t r, const uint8_t* src) {
      const HostPacked p = repack_rows(t, src, 1, cols);
      return std::equal(p.q.begin(), p.q.end(), h.q.begin() + r * qs) &&
             std::equal(p.scales.begin(), p.scales.end(), h.scales.begin() + r * ss);
    };
    int bad = 0;
    for (int64_t r = 0; r < 5; ++r) bad += !same_row(cat, r, r < 3 ? a.data() + rb * r : b.data() + rb * (r - 3));
    for (int64_t i = 0; i < 2; ++i) {
      bad += !same_row(gu, 2 * i, a.data() + rb * i);
      bad += !same_row(gu, 2 * i + 1, b.data() + rb * i);
    }
    EXPECT_EQ(bad, 0) << dtype_name(t);
  }
}

TEST(CudaRepack, ThreadPoolGivesTheSameBytes) {
  std::mt19937 rng(11);
  lmf::ThreadPool pool(4);
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::F16, DType::BF16, DType::Q4_K, DType::Q6_K}) {
    // 33 blocks: a partial second group (K-quants: 40 blocks, whole super-blocks); rows past the
    // pool's threshold
    const int64_t cols = lmf::cuda::kquant(t) ? 1280 : 1056;
    auto a = random_rows(t, 301, cols, rng), b = random_rows(t, 77, cols, rng);
    const std::vector<RowsRef> parts = {RowsRef{a.data(), 301}, RowsRef{b.data(), 77}};
    const HostPacked c1 = repack_concat(t, parts, cols), cp = repack_concat(t, parts, cols, &pool);
    const HostPacked g1 = repack_gate_up(t, a.data(), b.data(), 77, cols),
                     gp = repack_gate_up(t, a.data(), b.data(), 77, cols, &pool);
    const HostPacked r1 = repack_rows(t, a.data(), 301, cols), rp = repack_rows(t, a.data(), 301, cols, &pool);
    EXPECT_TRUE(c1.q == cp.q && c1.scales == cp.scales) << dtype_name(t) << " concat";
    EXPECT_TRUE(g1.q == gp.q && g1.scales == gp.scales) << dtype_name(t) << " gate/up";
    EXPECT_TRUE(r1.q == rp.q && r1.scales == rp.scales) << dtype_name(t) << " rows";
  }
}

// The load packs each weight in pieces of rows straight into its staging buffers (pack_rows with
// a RowSource, upload.h): the pieces put together are the whole repack, for concatenations and
// the gate/up interleave, with and without the pool, and a bad shape or type is refused.
TEST(CudaRepack, PackRowsInPiecesGivesTheWholeRepack) {
  std::mt19937 rng(13);
  lmf::ThreadPool pool(3);
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::F16, DType::BF16, DType::Q5_K}) {
    const int64_t cols = lmf::cuda::kquant(t) ? 1280 : 1056;
    auto a = random_rows(t, 130, cols, rng), b = random_rows(t, 70, cols, rng);
    const std::vector<RowsRef> parts = {RowsRef{a.data(), 130}, RowsRef{b.data(), 70}};
    const HostPacked cat = repack_concat(t, parts, cols), gu = repack_gate_up(t, a.data(), b.data(), 70, cols);
    const size_t qr = packed_q_bytes(t, cols), sr = packed_scale_bytes(t, cols);
    EXPECT_EQ(cat.q.size(), qr * 200);
    EXPECT_EQ(cat.scales.size(), sr * 200);
    auto pieces = [&](const RowSource& src, int64_t rows, lmf::ThreadPool* p) {
      HostPacked h;
      h.q.assign(qr * rows, 0xAB);  // poisoned: every byte must be written
      h.scales.assign(sr * rows, 0xAB);
      for (int64_t r0 = 0; r0 < rows; r0 += 67) {
        const int64_t r1 = std::min<int64_t>(rows, r0 + 67);
        pack_rows(t, cols, r0, r1, src, h.q.data() + qr * r0, h.scales.data() + sr * r0, p);
      }
      return h;
    };
    for (lmf::ThreadPool* p : {static_cast<lmf::ThreadPool*>(nullptr), &pool}) {
      const HostPacked c = pieces(concat_source(t, parts, cols), 200, p);
      const HostPacked g = pieces(gate_up_source(t, a.data(), b.data(), cols), 140, p);
      EXPECT_TRUE(c.q == cat.q && c.scales == cat.scales) << dtype_name(t) << " concat, pool " << (p != nullptr);
      EXPECT_TRUE(g.q == gu.q && g.scales == gu.scales) << dtype_name(t) << " gate/up, pool " << (p != nullptr);
    }
  }
  std::vector<uint8_t> q(4096), s(4096);
  auto a = random_rows(DType::Q4_0, 2, 64, rng);
  const RowSource src = concat_source(DType::Q4_0, {RowsRef{a.data(), 2}}, 64);
  EXPECT_TRUE(throws_error([&] { pack_rows(DType::Q4_0, 48, 0, 1, src, q.data(), s.data()); })) << "48 columns";
  EXPECT_TRUE(throws_error([&] { pack_rows(DType::Q4_0, 64, 1, 1, src, q.data(), s.data()); })) << "no rows";
  EXPECT_TRUE(throws_error([&] { pack_rows(DType::F32, 64, 0, 1, src, q.data(), s.data()); })) << "F32";
}

namespace {

// Element i of packed row r of a K-quant weight, decoded from the layout as kernels.h documents it
// (not from the repack's code): nibble tiles, the high-bit plane, block and super-block records.
float packed_kquant_elem(const HostPacked& h, int64_t r, int64_t i) {
  const int64_t nblk = h.cols / QK, c = i / QK, e = i % QK;
  const size_t qr = packed_q_bytes(h.type, h.cols), sr = packed_scale_bytes(h.type, h.cols);
  const uint8_t* q = h.q.data() + qr * size_t(r);
  const uint8_t* s = h.scales.data() + sr * size_t(r);
  const uint8_t nib_byte = q[(c / 32) * 32 * 16 + (c % 32) * 16 + e % 16];
  int code = e < 16 ? nib_byte & 15 : nib_byte >> 4;
  const int half = int(e / 16), k = int(e % 16) / 4, j = int(e % 4);
  if (h.type == DType::Q5_K) code |= ((q[nblk * 16 + c * 4 + j] >> (4 * half + k)) & 1) << 4;
  if (h.type == DType::Q6_K) code |= ((q[nblk * 16 + c * 8 + 4 * half + j] >> (2 * k)) & 3) << 4;
  const uint8_t* rec = s + c * 2;
  const uint8_t* sb = s + nblk * 2 + (c / 8) * 4;
  uint16_t d16, dm16;
  std::memcpy(&d16, sb, 2);
  std::memcpy(&dm16, sb + 2, 2);
  const float d = fp16_to_f32(d16), dm = fp16_to_f32(dm16);
  if (h.type == DType::Q6_K) return (d * float(int8_t(rec[half]))) * float(code - 32);
  return (d * float(rec[0])) * float(code) - dm * float(rec[1]);
}

}  // namespace

// The K-quants' packed form (kernels.h) holds format/quant's values bit for bit, on random bytes
// (every scale/min and high-bit pattern), for a row of one super-block and one whose last group
// of 32 blocks is partial; gate/up and pieces keep whole rows; rows not a multiple of 256 and
// other widths are refused with the type's name.
TEST(CudaRepack, KQuantPackedFormHoldsTheGgufValues) {
  std::mt19937 rng(17);
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    for (int64_t cols : {256, 1280, 8448}) {
      const int64_t rows = 5;
      auto raw = random_rows(t, rows, cols, rng);
      const HostPacked h = repack_rows(t, raw.data(), rows, cols);
      EXPECT_EQ(h.q.size(), size_t(rows) * packed_q_bytes(t, cols));
      EXPECT_EQ(packed_scale_bytes(t, cols), size_t(cols / 32) * 2 + size_t(cols / 256) * 4);
      std::vector<float> ref(static_cast<size_t>(cols));
      int bad = 0;
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(t, raw.data() + row_bytes(t, cols) * r, ref.data(), cols);
        for (int64_t i = 0; i < cols; ++i) {
          const float got = packed_kquant_elem(h, r, i);
          bad += std::memcmp(&got, &ref[size_t(i)], 4) != 0;
        }
      }
      EXPECT_EQ(bad, 0) << dtype_name(t) << " cols " << cols;
    }
    auto raw = random_rows(t, 2, 512, rng);
    EXPECT_TRUE(throws_error([&] { repack_rows(t, raw.data(), 2, 288); }, "multiple of 256"))
        << dtype_name(t) << ": 288 columns accepted";
  }
  EXPECT_TRUE(!cuda_weight_supported(DType::Q2_K));
  EXPECT_TRUE(cuda_weight_supported(DType::Q4_K) && cuda_weight_supported(DType::Q6_K));
}
