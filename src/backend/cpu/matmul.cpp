// matmul(): validation, activation quantization and the split of rows across threads. The math
// lives in the per-ISA kernels (matmul_scalar.cpp, matmul_avx2.cpp, matmul_avx512.cpp).
#include "backend/cpu/matmul.h"

#include <algorithm>

#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/quant_units.h"
#include "util/status.h"

namespace lmf::cpu {

namespace {

// Rows are handed out in groups of this many: a multiple of every kernel's row tile, small
// enough to balance 1024-row projections over many threads.
constexpr int64_t kRowGroup = 16;

bool is_quantized(DType t) { return type_info(t).quantized; }

static_assert(kRowGroup % kX16Rows == 0, "row ranges start at panel boundaries");

// Rows [r0, r1) of a task whose weight is repacked in 16-row panels: the panel GEMV where the
// ISA has one and T is small, else the rows rebuilt panel by panel for the row-major kernels.
void run_x16(const MatmulKernels& k, const MatmulTask& task, int64_t r0, int64_t r1, int64_t nb, bool a16,
             const MatmulScratch& scratch, int64_t T) {
  const X16Weight& x = *task.x16;
  float* y = task.y + r0;
  if (T < kX16GemvMaxTokens && (a16 ? k.quant16_x16 != nullptr : k.quant_x16 != nullptr)) {
    if (a16) k.quant16_x16(x.type, x.panel(r0 / kX16Rows), r1 - r0, nb, scratch.xq16.data(), T, y, task.ldy);
    else k.quant_x16(x.type, x.panel(r0 / kX16Rows), r1 - r0, nb, scratch.xq.data(), T, y, task.ldy);
    return;
  }
  // Rebuilt kChunk rows at a time: a kernel call has per-call work (the packed GEMM copies the
  // activations block-major) that 16-row calls would repeat 16 times as often.
  constexpr int64_t kChunk = 256;
  static_assert(kChunk % kX16Rows == 0);
  thread_local std::vector<uint8_t> rows;
  const size_t stride = task.w->row_stride();
  rows.resize(size_t(kChunk) * stride);
  for (int64_t r = r0; r < r1; r += kChunk) {
    const int64_t n = std::min(kChunk, r1 - r);
    for (int64_t i = 0; i < n; i += kX16Rows)
      unpack_x16_rows(x, x.panel((r + i) / kX16Rows), 0, int(std::min<int64_t>(kX16Rows, n - i)), rows.data() + size_t(i) * stride);
    if (a16) k.quant16(task.w->type, rows.data(), stride, n, nb, scratch.xq16.data(), T, task.y + r, task.ldy);
    else k.quant(task.w->type, rows.data(), stride, n, nb, scratch.xq.data(), T, task.y + r, task.ldy);
  }
}

const MatmulKernels& kernels_for(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return matmul_kernels_avx512();
    case Isa::Avx2: return matmul_kernels_avx2();
    case Isa::Scalar: break;
  }
  return matmul_kernels_scalar();
}

void validate(std::span<const MatmulTask> tasks, const float* x, int64_t T, int64_t ldx) {
  if (tasks.empty()) LMF_FAIL("matmul: expected at least one task, got none");
  const int64_t cols = tasks[0].w ? tasks[0].w->cols : 0;
  for (const MatmulTask& t : tasks) {
    if (!t.w || !t.w->data || !t.y) LMF_FAIL("matmul: task with a null weight, data or output");
    const Weight& w = *t.w;
    switch (w.type) {
      case DType::F32: case DType::F16: case DType::BF16:
      case DType::Q4_0: case DType::Q4_1: case DType::Q8_0: break;
      default:
        if (unit_form(w.type)) break;
        LMF_FAIL("matmul: weight '", w.name, "': unsupported type ", dtype_name(w.type));
    }
    if (w.cols != cols)
      LMF_FAIL("matmul: tasks share one input, expected ", cols, " columns, weight '", w.name,
               "' has ", w.cols);
    if (w.rows < 1 || w.cols < 1 || (is_quantized(w.type) && w.cols % type_info(w.type).block != 0))
      LMF_FAIL("matmul: weight '", w.name, "': bad shape [", w.rows, ", ", w.cols, "] for ",
               dtype_name(w.type));
    if (t.x16 && (w.type != t.x16->type || t.x16->nb != w.cols / type_info(w.type).block))
      LMF_FAIL("matmul: weight '", w.name, "': its 16-row repack does not match (", dtype_name(w.type), ")");
    if (w.nbytes && w.nbytes < size_t(w.rows) * w.row_stride())
      LMF_FAIL("matmul: weight '", w.name, "': expected ", size_t(w.rows) * w.row_stride(),
               " bytes, got ", w.nbytes);
    if (t.ldy < w.rows)
      LMF_FAIL("matmul: weight '", w.name, "': output stride ", t.ldy, " < rows ", w.rows);
  }
  if (T < 0 || (T > 0 && !x)) LMF_FAIL("matmul: bad input (T=", T, ")");
  if (ldx < cols) LMF_FAIL("matmul: input stride ", ldx, " < cols ", cols);
}

}  // namespace

void quantize_act_row(const float* x, int64_t n, ActBlock* out, Isa isa) {
  if (!isa_supported(isa)) LMF_FAIL("quantize_act_row: ISA ", isa_name(isa), " is not supported by this CPU");
  if (n % QK != 0) LMF_FAIL("quantize_act_row: n must be a multiple of 32, got ", n);
  kernels_for(isa).quant_act(x, n, out);
}

void quantize_act16_row(const float* x, int64_t n, ActBlock16* out, Isa isa) {
  if (!isa_supported(isa)) LMF_FAIL("quantize_act16_row: ISA ", isa_name(isa), " is not supported by this CPU");
  if (n % QK != 0) LMF_FAIL("quantize_act16_row: n must be a multiple of 32, got ", n);
  kernels_for(isa).quant_act16(x, n, out);
}

void matmul(std::span<const MatmulTask> tasks, const float* x, int64_t T, int64_t ldx,
            ThreadPool& pool, MatmulScratch& scratch) {
  matmul(tasks, x, T, ldx, pool, scratch, active_isa());
}

void matmul(std::span<const MatmulTask> tasks, const float* x, int64_t T, int64_t ldx,
            ThreadPool& pool, MatmulScratch& scratch, Isa isa, ActBits act) {
  validate(tasks, x, T, ldx);
  if (!isa_supported(isa)) LMF_FAIL("matmul: ISA ", isa_name(isa), " is not supported by this CPU");
  if (T == 0) return;
  const MatmulKernels& k = kernels_for(isa);
  const int64_t cols = tasks[0].w->cols;

  // Quantize x once for every quantized task: [T, nb] blocks.
  const bool any_quant = std::any_of(tasks.begin(), tasks.end(),
                                     [](const MatmulTask& t) { return is_quantized(t.w->type); });
  const int64_t nb = cols / QK;
  const bool a16 = act == ActBits::Int16;
  if (any_quant) {
    if (a16 && scratch.xq16.size() < size_t(T * nb)) scratch.xq16.resize(size_t(T * nb));
    if (!a16 && scratch.xq.size() < size_t(T * nb)) scratch.xq.resize(size_t(T * nb));
    auto quant_rows = [&](int, int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        if (a16) k.quant_act16(x + t * ldx, cols, scratch.xq16.data() + t * nb);
        else k.quant_act(x + t * ldx, cols, scratch.xq.data() + t * nb);
      }
    };
    if (T >= 4 && pool.size() > 1)
      pool.parallel_for(T, quant_rows);
    else
      quant_rows(0, 0, T);
  }

  // Row groups of all tasks, numbered task by task; each thread takes a contiguous range.
  int64_t total = 0;
  std::vector<int64_t> first_group;  // [tasks.size() + 1]
  first_group.reserve(tasks.size() + 1);
  for (const MatmulTask& t : tasks) {
    first_group.push_back(total);
    total += (t.w->rows + kRowGroup - 1) / kRowGroup;
  }
  first_group.push_back(total);

  auto run = [&](int, int64_t g0, int64_t g1) {
    for (size_t ti = 0; ti < tasks.size() && g0 < g1; ++ti) {
      const int64_t tb = first_group[ti], te = first_group[ti + 1];
      if (g0 >= te) continue;
      const int64_t ge = std::min(g1, te);
      const MatmulTask& task = tasks[ti];
      const Weight& w = *task.w;
      const int64_t r0 = (g0 - tb) * kRowGroup, r1 = std::min(w.rows, (ge - tb) * kRowGroup);
      const size_t stride = w.row_stride();
      const uint8_t* wr = w.data + size_t(r0) * stride;
      float* y = task.y + r0;
      if (task.x16)
        run_x16(k, task, r0, r1, nb, a16, scratch, T);
      else if (is_quantized(w.type) && a16)
        k.quant16(w.type, wr, stride, r1 - r0, nb, scratch.xq16.data(), T, y, task.ldy);
      else if (is_quantized(w.type))
        k.quant(w.type, wr, stride, r1 - r0, nb, scratch.xq.data(), T, y, task.ldy);
      else
        k.flt(w.type, wr, stride, r1 - r0, cols, x, ldx, T, y, task.ldy);
      if (task.bias)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t r = r0; r < r1; ++r) task.y[t * task.ldy + r] += task.bias[r];
      g0 = ge;
    }
  };
  if (pool.size() > 1 && total > 1)
    pool.parallel_for(total, run);
  else
    run(0, 0, total);
}

}  // namespace lmf::cpu
