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
      if (is_quantized(w.type) && a16)
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
