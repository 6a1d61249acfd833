#include "backend/cpu/repack.h"

#include <cstring>

#include "format/quant/types.h"

namespace lmf::cpu {

bool x16_supported(const Weight& w) { return w.type == DType::Q4_0 && w.cols % QK == 0 && w.rows > 0 && w.data; }

X16Weight repack_x16(const Weight& w) {
  X16Weight x;
  x.nb = w.cols / QK;
  const int64_t n_panels = (w.rows + kX16Rows - 1) / kX16Rows;
  x.blocks.reset(new X16Block[size_t(n_panels * x.nb)]());  // zero rows past the end: d = 0
  const size_t stride = w.row_stride();
  for (int64_t r = 0; r < w.rows; ++r) {
    const auto* row = reinterpret_cast<const BlockQ4_0*>(w.data + size_t(r) * stride);
    X16Block* p = x.blocks.get() + (r / kX16Rows) * x.nb;
    const int lane = int(r % kX16Rows);
    for (int64_t b = 0; b < x.nb; ++b) {
      p[b].d[lane] = row[b].d;
      for (int k = 0; k < 4; ++k) std::memcpy(&p[b].q[k][lane], row[b].qs + 4 * k, 4);
    }
  }
  return x;
}

void unpack_x16_rows(const X16Block* panel, int64_t nb, int r0, int n, uint8_t* dst) {
  for (int i = 0; i < n; ++i) {
    auto* row = reinterpret_cast<BlockQ4_0*>(dst + size_t(i) * size_t(nb) * sizeof(BlockQ4_0));
    for (int64_t b = 0; b < nb; ++b) {
      row[b].d = panel[b].d[r0 + i];
      for (int k = 0; k < 4; ++k) std::memcpy(row[b].qs + 4 * k, &panel[b].q[k][r0 + i], 4);
    }
  }
}

}  // namespace lmf::cpu
