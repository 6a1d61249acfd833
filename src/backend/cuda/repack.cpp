// Host-side repacking of GGUF rows into the layouts the CUDA kernels read (kernels.h documents
// them): the 16-byte tiled layout of the decode GEMVs, and the per-SM tiles of the persistent step.
#include <cstring>

#include "backend/cuda/kernels.h"
#include "format/quant/kquants.h"
#include "util/status.h"
#include "util/threadpool.h"

namespace lmf {
bool cuda_weight_supported(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q4_0: case DType::Q4_1: case DType::Q8_0:
    case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
    case DType::Q3_K: case DType::IQ4_NL: case DType::Q5_0:  // re-encoded at load (format/quant/transcode.h)
      return true;
    default:
      return false;
  }
}
}  // namespace lmf

namespace lmf::cuda {
namespace {

int pieces(DType t) {
  switch (t) {
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return 1;
    case DType::Q8_0: return 2;
    case DType::F16:
    case DType::BF16: return 4;
    default: LMF_FAIL("cuda repack: unsupported weight type ", dtype_name(t));
  }
}
int scale_bytes(DType t) {
  return t == DType::Q4_0 || t == DType::Q8_0 ? 2 : t == DType::Q4_1 ? 4 : 0;
}
// Bytes of code bits above the nibbles per 32-element block (kernels.h, K-quants).
int high_bytes(DType t) { return t == DType::Q5_K ? 4 : t == DType::Q6_K ? 8 : 0; }

// One GGUF K-quant row into the packed form of kernels.h: per 32-element block c the nibble
// bytes (into the tiles, like Q4_0's), the high bits (after the tiles) and the block record; per
// super-block its record after the block records.
void pack_row_kquant(DType t, const uint8_t* src, int64_t cols, uint8_t* dst_q, uint8_t* dst_s) {
  const int64_t nblk = cols / QK, nsb = cols / QK_K;
  const int hb = high_bytes(t);
  uint8_t* hi_plane = dst_q + nblk * 16;
  uint8_t* sb_rec = dst_s + nblk * 2;
  for (int64_t b = 0; b < nsb; ++b) {
    uint8_t code[QK_K];  // the unsigned codes (Q6_K: q + 32), element order
    uint8_t rec[8][2];
    uint16_t d = 0, d2 = 0;
    if (t == DType::Q4_K || t == DType::Q5_K) {
      const uint8_t* qs;
      const uint8_t* qh = nullptr;
      const uint8_t* scales;
      if (t == DType::Q4_K) {
        const auto* k = reinterpret_cast<const BlockQ4_K*>(src) + b;
        d = k->d, d2 = k->dmin, qs = k->qs, scales = k->scales;
      } else {
        const auto* k = reinterpret_cast<const BlockQ5_K*>(src) + b;
        d = k->d, d2 = k->dmin, qs = k->qs, qh = k->qh, scales = k->scales;
      }
      for (int e = 0; e < QK_K; ++e) {
        int q = (qs[32 * (e / 64) + e % 32] >> (4 * ((e % 64) / 32))) & 15;
        if (qh) q |= ((qh[e % 32] >> (e / 32)) & 1) << 4;
        code[e] = uint8_t(q);
      }
      for (int j = 0; j < 8; ++j) unpack_scale_min_k4(scales, j, rec[j][0], rec[j][1]);
    } else {  // Q6_K
      const auto* k = reinterpret_cast<const BlockQ6_K*>(src) + b;
      d = k->d;
      for (int e = 0; e < QK_K; ++e) {
        const int r = e % 128;
        code[e] = uint8_t(((k->ql[64 * (e / 128) + r % 64] >> (4 * (r / 64))) & 15) |
                          (((k->qh[32 * (e / 128) + r % 32] >> (2 * (r / 32))) & 3) << 4));
      }
      for (int j = 0; j < 8; ++j) rec[j][0] = uint8_t(k->scales[2 * j]), rec[j][1] = uint8_t(k->scales[2 * j + 1]);
    }
    std::memcpy(sb_rec + b * 4, &d, 2);
    std::memcpy(sb_rec + b * 4 + 2, &d2, 2);
    for (int j = 0; j < 8; ++j) {
      const int64_t c = b * 8 + j;
      const uint8_t* q = code + 32 * j;
      uint8_t* nib = dst_q + (c / 32) * 32 * 16 + (c % 32) * 16;  // P = 1: piece 0 of lane l at l * 16
      for (int i = 0; i < 16; ++i) nib[i] = uint8_t((q[i] & 15) | ((q[i + 16] & 15) << 4));
      dst_s[c * 2] = rec[j][0];
      dst_s[c * 2 + 1] = rec[j][1];
      uint8_t* h = hi_plane + c * hb;
      std::memset(h, 0, size_t(hb));
      for (int i = 0; i < 32; ++i) {
        const int half = i / 16, k = (i % 16) / 4, jj = i % 4;
        if (t == DType::Q5_K) h[jj] |= uint8_t(((q[i] >> 4) & 1) << (4 * half + k));
        if (t == DType::Q6_K) h[4 * half + jj] |= uint8_t(((q[i] >> 4) & 3) << (2 * k));
      }
    }
  }
}

// Packs one GGUF row (src) into dst_q (row_stride bytes) and dst_s (nblk*scale_bytes).
void pack_row(DType t, const uint8_t* src, int64_t cols, uint8_t* dst_q, uint8_t* dst_s) {
  if (kquant(t)) return pack_row_kquant(t, src, cols, dst_q, dst_s);
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

void check_shape(DType t, int64_t rows, int64_t cols) {
  (void)pieces(t);  // the type check
  if (cols <= 0 || cols % QK != 0) LMF_FAIL("cuda repack: cols must be a multiple of 32, got ", cols);
  if (kquant(t) && cols % QK_K != 0)
    LMF_FAIL("cuda repack: ", dtype_name(t), " rows must be a multiple of 256 elements, got ", cols);
  if (rows <= 0) LMF_FAIL("cuda repack: rows must be positive, got ", rows);
}

HostPacked make(DType t, int64_t rows, int64_t cols) {
  check_shape(t, rows, cols);
  HostPacked h;
  h.type = t;
  h.rows = rows;
  h.cols = cols;
  h.q.resize(packed_q_bytes(t, cols) * rows);
  h.scales.resize(packed_scale_bytes(t, cols) * rows);
  return h;
}

// f(i) for i in [0, n): on the pool's threads when there is one (rows are independent: each
// writes only its own place), else in order on this thread. The callers have checked the type
// and shape before, so nothing in f throws.
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

int64_t total_rows(const std::vector<RowsRef>& parts) {
  int64_t rows = 0;
  for (auto& p : parts) rows += p.rows;
  return rows;
}

}  // namespace

size_t packed_q_bytes(DType t, int64_t cols) { return size_t(cols / QK) * (pieces(t) * 16 + high_bytes(t)); }
size_t packed_scale_bytes(DType t, int64_t cols) {
  (void)pieces(t);
  return kquant(t) ? size_t(cols / QK) * 2 + size_t(cols / QK_K) * 4 : size_t(cols / QK) * scale_bytes(t);
}

RowSource concat_source(DType t, const std::vector<RowsRef>& parts, int64_t cols) {
  const size_t rb = row_bytes(t, cols);
  return [parts, rb](int64_t r) {
    for (const RowsRef& p : parts) {
      if (r < p.rows) return static_cast<const uint8_t*>(p.data) + rb * size_t(r);
      r -= p.rows;
    }
    return static_cast<const uint8_t*>(nullptr);  // past the end: pack_rows' callers never ask
  };
}

RowSource gate_up_source(DType t, const void* gate, const void* up, int64_t cols) {
  const size_t rb = row_bytes(t, cols);
  const auto* g = static_cast<const uint8_t*>(gate);
  const auto* u = static_cast<const uint8_t*>(up);
  return [g, u, rb](int64_t r) { return (r % 2 ? u : g) + rb * size_t(r / 2); };
}

void pack_rows(DType t, int64_t cols, int64_t r0, int64_t r1, const RowSource& src, uint8_t* q, uint8_t* scales,
               ThreadPool* pool) {
  check_shape(t, r1 - r0, cols);
  const size_t qb = packed_q_bytes(t, cols), sb = packed_scale_bytes(t, cols);
  for_rows(r1 - r0, pool, [&](int64_t i) { pack_row(t, src(r0 + i), cols, q + qb * i, scales + sb * i); });
}

HostPacked repack_rows(DType t, const void* src, int64_t rows, int64_t cols, ThreadPool* pool) {
  return repack_concat(t, {RowsRef{src, rows}}, cols, pool);
}

HostPacked repack_concat(DType t, const std::vector<RowsRef>& parts, int64_t cols, ThreadPool* pool) {
  HostPacked h = make(t, total_rows(parts), cols);
  pack_rows(t, cols, 0, h.rows, concat_source(t, parts, cols), h.q.data(), h.scales.data(), pool);
  return h;
}

HostPacked repack_gate_up(DType t, const void* gate, const void* up, int64_t rows, int64_t cols, ThreadPool* pool) {
  HostPacked h = make(t, 2 * rows, cols);
  pack_rows(t, cols, 0, h.rows, gate_up_source(t, gate, up, cols), h.q.data(), h.scales.data(), pool);
  return h;
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

HostTiles repack_tiles(DType t, int64_t rows, int64_t cols, const RowSource& src) {
  HostTiles h = make_tiles(t, rows, cols);
  for (int64_t r = 0; r < rows; ++r) tile_pack_at(h, r, src(r));
  return h;
}

}  // namespace

HostTiles repack_tiles_concat(DType t, const std::vector<RowsRef>& parts, int64_t cols) {
  return repack_tiles(t, total_rows(parts), cols, concat_source(t, parts, cols));
}

HostTiles repack_tiles_gate_up(DType t, const void* gate, const void* up, int64_t rows, int64_t cols) {
  return repack_tiles(t, 2 * rows, cols, gate_up_source(t, gate, up, cols));
}

}  // namespace lmf::cuda
