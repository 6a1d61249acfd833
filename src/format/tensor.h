// A weight as graphs and backends see it (below the model layer, so src/graph and the backends
// need nothing from src/model): a 1-D or 2-D tensor in its file layout (row-major, each row of
// `cols` elements stored as row_bytes(type, cols) bytes). rows = output features, cols = input.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "format/quant/types.h"

namespace lmf {

struct Weight {
  std::string name;     // GGUF tensor name, e.g. "blk.3.attn_q.weight"
  DType type = DType::F32;
  int64_t rows = 1;     // ne[1] (1 for vectors)
  int64_t cols = 0;     // ne[0]
  const uint8_t* data = nullptr;  // host memory (mmap of the file), row-major
  size_t nbytes = 0;
  size_t row_stride() const { return row_bytes(type, cols); }
};

}  // namespace lmf
