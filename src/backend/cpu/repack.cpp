#include "backend/cpu/repack.h"

#include <cstring>

#include "format/quant/kquants.h"
#include "format/quant/types.h"

namespace lmf::cpu {

namespace {

// One row's block <-> its lane of a panel block; to_panel: copy row -> panel (the row is only
// read then: repack_x16 passes the weight's own, const, rows), else panel -> row.
void move_q4_0(X16Q4_0& p, int lane, BlockQ4_0& row, bool to_panel) {
  if (to_panel) p.d[lane] = row.d;
  else row.d = p.d[lane];
  for (int k = 0; k < 4; ++k)
    if (to_panel) std::memcpy(&p.q[k][lane], row.qs + 4 * k, 4);
    else std::memcpy(row.qs + 4 * k, &p.q[k][lane], 4);
}

void move_q4_k(X16Q4_K& p, int lane, BlockQ4_K& row, bool to_panel) {
  auto mv = [&](uint32_t& word, uint8_t* bytes) {
    if (to_panel) std::memcpy(&word, bytes, 4);
    else std::memcpy(bytes, &word, 4);
  };
  if (to_panel) p.d[lane] = row.d, p.dmin[lane] = row.dmin;
  else row.d = p.d[lane], row.dmin = p.dmin[lane];
  for (int i = 0; i < 3; ++i) mv(p.sc[i][lane], row.scales + 4 * i);
  for (int g = 0; g < 4; ++g)
    for (int s = 0; s < 8; ++s) mv(p.q[g][s][lane], row.qs + 32 * g + 4 * s);
}

template <class Panel, class Row, class Move>
void for_rows(const X16Weight& x, uint8_t* panel, int r0, int n, uint8_t* rows, size_t stride, bool to_panel, Move mv) {
  for (int i = 0; i < n; ++i)
    for (int64_t b = 0; b < x.nb; ++b)
      mv(reinterpret_cast<Panel*>(panel)[b], r0 + i, reinterpret_cast<Row*>(rows + size_t(i) * stride)[b], to_panel);
}

void move_rows(const X16Weight& x, uint8_t* panel, int r0, int n, uint8_t* rows, size_t stride, bool to_panel) {
  if (x.type == DType::Q4_0) for_rows<X16Q4_0, BlockQ4_0>(x, panel, r0, n, rows, stride, to_panel, move_q4_0);
  else for_rows<X16Q4_K, BlockQ4_K>(x, panel, r0, n, rows, stride, to_panel, move_q4_k);
}

}  // namespace

bool x16_supported(const Weight& w) {
  return (w.type == DType::Q4_0 || w.type == DType::Q4_K) && w.rows > 0 && w.data &&
         w.cols % type_info(w.type).block == 0;
}

X16Weight repack_x16(const Weight& w) {
  X16Weight x;
  x.type = w.type;
  x.nb = w.cols / type_info(w.type).block;
  x.block_bytes = w.type == DType::Q4_0 ? sizeof(X16Q4_0) : sizeof(X16Q4_K);
  const int64_t n_panels = (w.rows + kX16Rows - 1) / kX16Rows;
  x.bytes.reset(new uint8_t[size_t(n_panels * x.nb) * x.block_bytes]());  // rows past the end: zero
  const size_t stride = w.row_stride();
  for (int64_t p = 0; p < n_panels; ++p) {
    const int n = int(std::min<int64_t>(kX16Rows, w.rows - p * kX16Rows));
    move_rows(x, const_cast<uint8_t*>(x.panel(p)), 0, n, const_cast<uint8_t*>(w.data) + size_t(p * kX16Rows) * stride,
              stride, true);
  }
  return x;
}

void unpack_x16_rows(const X16Weight& x, const uint8_t* panel, int r0, int n, uint8_t* dst) {
  move_rows(x, const_cast<uint8_t*>(panel), r0, n, dst, size_t(x.nb) * type_info(x.type).block_bytes, false);
}

}  // namespace lmf::cpu
