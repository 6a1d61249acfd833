// The CPU matmul: the hot path of the CPU backend (every projection of the model).
//
// For each task and t in [0, T): y[t*ldy + o] = dot(W[o, :], x[t*ldx + :]) (+ bias[o]).
// Outputs must not overlap x (it is read while outputs are written) nor each other.
// All tasks share the input x (Q/K/V, or gate/up, as one pass): for quantized weights x is
// quantized to 8-bit or 16-bit blocks (ActBits) once, and the rows of all tasks are split across
// the pool's threads together. Quantized weights (Q4_0, Q4_1, Q8_0) use integer dot products
// against the quantized activations; F32/F16/BF16 weights use float math on the f32 activations.
// T == 1 is a GEMV (memory bound); T > 1 runs a register-tiled GEMM that reads each weight block
// once per tile of tokens.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/repack.h"
#include "format/tensor.h"
#include "util/threadpool.h"

namespace lmf::cpu {

struct MatmulTask {
  const Weight* w;      // [rows, cols], cols equal across tasks
  float* y;             // [T, ldy], ldy >= w->rows
  int64_t ldy;
  const float* bias;    // nullable, f32 [rows]
  const X16Weight* x16 = nullptr;  // w (Q4_0 / Q4_K) repacked in 16-row panels (repack.h), read instead of w->data
};

// Reused between calls so the steady state allocates nothing.
struct MatmulScratch {
  std::vector<ActBlock> xq;      // [T, cols/32] 8-bit activations
  std::vector<ActBlock16> xq16;  // [T, cols/32] 16-bit activations
};

// 8-bit activations on the active ISA (the CPU backend passes its cpu_act16 choice explicitly).
void matmul(std::span<const MatmulTask> tasks, const float* x, int64_t T, int64_t ldx,
            ThreadPool& pool, MatmulScratch& scratch);
// Same, on an explicit ISA (must be supported by this CPU) and activation width.
void matmul(std::span<const MatmulTask> tasks, const float* x, int64_t T, int64_t ldx,
            ThreadPool& pool, MatmulScratch& scratch, Isa isa, ActBits act = ActBits::Int8);

}  // namespace lmf::cpu
