// Host-side repacking of GGUF rows into the layouts the CUDA kernels read (kernels.h documents
// them): the 16-byte tiled layout of the decode GEMVs, and the per-SM tiles of the persistent step.
#include <cstring>

#include "backend/cuda/kernels.h"
#include "util/status.h"
#include "util/threadpool.h"

namespace lmf::cuda {
namespace {

int pieces(DType t) {
  switch (t) {
    case DType::Q4_0:
    case DType::Q4_1: return 1;
    case DType::Q8_0: return 2;
    case DType::F16:
    case DType::BF16: return 4;
    default: LMF_FAIL("cuda repack: unsupported weight type ", dtype_name(t));
  }
}
int scale_bytes(DType t) {
  return t == DType::Q4_0 || t == DType::Q8_0 ? 2 : t == DType::Q4_1 ? 4 : 0;
}

// Packs one GGUF row (src) into dst_q (row_stride bytes) and dst_s (nblk*scale_bytes).
void pack_row(DType t, const uint8_t* src, int64_t cols, uint8_t* dst_q, uint8_t* dst_s) {
  const int P = pieces(t);
  const int64_t nblk = cols / QK;
  for (int64_t c = 0; c < nblk; ++c) {
    const int64_t g = c / 32, l = c % 32, gb = std::min<int64_t>(32, nblk - 32 * g);
    uint8_t* blk = dst_q + g * 32 * P * 16;
    const uint8_t* data;  // P*16 bytes of this block's elements
    switch (t) {
      case DType::Q4_0: {
        auto* b = reinterpret_cast<const BlockQ4_0*>(src) + c;
        std::memcpy(dst_s + c * 2, &b->d, 2);
        data = b->qs;
        break;
      }
      case DType::Q4_1: {
        auto* b = reinterpret_cast<const BlockQ4_1*>(src) + c;
        std::memcpy(dst_s + c * 4, &b->d, 2);
        std::memcpy(dst_s + c * 4 + 2, &b->m, 2);
        data = b->qs;
        break;
      }
      case DType::Q8_0: {
        auto* b = reinterpret_cast<const BlockQ8_0*>(src) + c;
        std::memcpy(dst_s + c * 2, &b->d, 2);
        data = reinterpret_cast<const uint8_t*>(b->qs);
        break;
      }
      default: data = src + c * QK * 2; break;  // F16 / BF16: 64 bytes of 32 elements
    }
    for (int p = 0; p < P; ++p) std::memcpy(blk + (p * gb + l) * 16, data + p * 16, 16);
  }
}

HostPacked make(DType t, int64_t rows, int64_t cols) {
  if (cols <= 0 || cols % QK != 0) LMF_FAIL("cuda repack: cols must be a multiple of 32, got ", cols);
  if (rows <= 0) LMF_FAIL("cuda repack: rows must be positive, got ", rows);
  HostPacked h;
  h.type = t;
  h.rows = rows;
  h.cols = cols;
  const size_t stride = size_t(cols / QK) * pieces(t) * 16;
  h.q.resize(stride * rows);
  h.scales.resize(size_t(rows) * (cols / QK) * scale_bytes(t));
  return h;
}

void pack_at(HostPacked& h, int64_t row, const uint8_t* src) {
  const size_t stride = size_t(h.cols / QK) * pieces(h.type) * 16;
  const size_t sb = size_t(h.cols / QK) * scale_bytes(h.type);
  pack_row(h.type, src, h.cols, h.q.data() + stride * row, h.scales.data() + sb * row);
}

// The output rows of a concatenation (the parts' rows in order) and of a gate/up interleave
// (gate0, up0, gate1, ...): make_h(rows) builds the empty result, at(result, row, src) packs one GGUF
// row. Shared by both layouts.
int64_t total_rows(const std::vector<RowsRef>& parts) {
  int64_t rows = 0;
  for (auto& p : parts) rows += p.rows;
  return rows;
}
// f(i) for i in [0, n): on the pool's threads when there is one (rows are independent: each
// writes only its own place), else in order on this thread. make_h has checked the type and
// shape before, so nothing in f throws.
template <class F>
void for_rows(int64_t n, ThreadPool* pool, const F& f) {
  if (!pool || pool->size() < 2 || n < 64) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
  pool->parallel_for(n, [&](int, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) f(i);
  });
}
template <class H, class Make, class At>
H concat_rows(DType t, const std::vector<RowsRef>& parts, int64_t cols, Make make_h, At at, ThreadPool* pool) {
  H h = make_h(total_rows(parts));
  const size_t rb = row_bytes(t, cols);
  int64_t r0 = 0;
  for (auto& p : parts) {
    const auto* src = static_cast<const uint8_t*>(p.data);
    for_rows(p.rows, pool, [&](int64_t i) { at(h, r0 + i, src + rb * i); });
    r0 += p.rows;
  }
  return h;
}
template <class H, class Make, class At>
H interleave_rows(DType t, const void* gate, const void* up, int64_t rows, int64_t cols, Make make_h, At at,
                  ThreadPool* pool) {
  H h = make_h(2 * rows);
  const size_t rb = row_bytes(t, cols);
  for_rows(rows, pool, [&](int64_t i) {
    at(h, 2 * i, static_cast<const uint8_t*>(gate) + rb * i);
    at(h, 2 * i + 1, static_cast<const uint8_t*>(up) + rb * i);
  });
  return h;
}

}  // namespace

HostPacked repack_rows(DType t, const void* src, int64_t rows, int64_t cols, ThreadPool* pool) {
  return repack_concat(t, {RowsRef{src, rows}}, cols, pool);
}

HostPacked repack_concat(DType t, const std::vector<RowsRef>& parts, int64_t cols, ThreadPool* pool) {
  return concat_rows<HostPacked>(t, parts, cols, [&](int64_t rows) { return make(t, rows, cols); }, pack_at, pool);
}

HostPacked repack_gate_up(DType t, const void* gate, const void* up, int64_t rows, int64_t cols, ThreadPool* pool) {
  return interleave_rows<HostPacked>(t, gate, up, rows, cols, [&](int64_t n) { return make(t, n, cols); }, pack_at,
                                     pool);
}

namespace {

HostTiles make_tiles(DType t, int64_t rows, int64_t cols) {
  if (t != DType::Q4_0) LMF_FAIL("cuda tile repack: only Q4_0 is supported, got ", dtype_name(t));
  if (rows <= 0 || rows % kTileRows != 0)
    LMF_FAIL("cuda tile repack: rows must be a positive multiple of ", kTileRows, ", got ", rows);
  if (cols <= 0 || cols % (kTileBlocks * QK) != 0)
    LMF_FAIL("cuda tile repack: cols must be a positive multiple of ", kTileBlocks * QK, ", got ", cols);
  HostTiles h;
  h.rows = rows;
  h.cols = cols;
  h.bytes.resize(size_t(rows / kTileRows) * size_t(cols / (kTileBlocks * QK)) * kTileBytes);
  return h;
}

// One GGUF Q4_0 row into its place in the tiles.
void tile_pack_at(HostTiles& h, int64_t row, const uint8_t* src) {
  const int64_t nblk = h.cols / QK, tiles_per_group = nblk / kTileBlocks;
  const int64_t g = row / kTileRows, r = row % kTileRows;
  for (int64_t c = 0; c < nblk; ++c) {
    const auto* blk = reinterpret_cast<const BlockQ4_0*>(src) + c;
    uint8_t* tile = h.bytes.data() + size_t(g * tiles_per_group + c / kTileBlocks) * kTileBytes;
    const int64_t slot = (c % kTileBlocks) * kTileRows + r;
    std::memcpy(tile + slot * 16, blk->qs, 16);
    std::memcpy(tile + kTileQBytes + slot * 2, &blk->d, 2);
  }
}

}  // namespace

HostTiles repack_tiles_concat(DType t, const std::vector<RowsRef>& parts, int64_t cols) {
  return concat_rows<HostTiles>(t, parts, cols, [&](int64_t rows) { return make_tiles(t, rows, cols); }, tile_pack_at,
                                nullptr);
}

HostTiles repack_tiles_gate_up(DType t, const void* gate, const void* up, int64_t rows, int64_t cols) {
  return interleave_rows<HostTiles>(t, gate, up, rows, cols, [&](int64_t n) { return make_tiles(t, n, cols); },
                                    tile_pack_at, nullptr);
}

}  // namespace lmf::cuda
