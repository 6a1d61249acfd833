// The quantize driver: plan each tensor's type from the mix, then stream the write; each
// producer dequantizes its source rows to f32 and quantizes them into the writer's buffer, rows
// split over the thread pool.
#include "model/quantize_gguf.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <string>

#include "format/gguf/gguf.h"
#include "format/quant/quantize.h"
#include "util/progress.h"
#include "util/status.h"
#include "util/threadpool.h"

namespace lmf {

namespace fs = std::filesystem;

namespace {

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

void quantize_tensor(const gguf::TensorInfo& src, DType type, uint8_t* dst, ThreadPool& pool) {
  const int64_t cols = src.ne[0], rows = src.rows();
  const size_t sb = row_bytes(src.type, cols), db = row_bytes(type, cols);
  pool.parallel_for(rows, [&](int, int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = r0; r < r1; ++r) {
      dequantize_row(src.type, src.data + size_t(r) * sb, row.data(), cols);
      for (int64_t i = 0; i < cols; ++i)
        if (!std::isfinite(row[size_t(i)]))
          LMF_FAIL("tensor '", src.name, "' holds ", row[size_t(i)], " at row ", r, ", column ", i,
                   " (corrupted file?)");
      quantize_row(type, row.data(), dst + size_t(r) * db, cols);
    }
  });
}

}  // namespace

QuantizeResult quantize_gguf(const QuantizeOptions& o) {
  if (o.out.empty()) LMF_FAIL("no output file given");
  if (fs::exists(o.out) && fs::equivalent(o.in, o.out)) LMF_FAIL(o.out, ": is the input file");
  if (fs::exists(o.out) && !o.force) LMF_FAIL(o.out, ": already exists (pass --force to overwrite it)");
  if (fs::is_directory(o.out)) LMF_FAIL(o.out, ": is a directory, expected a file name");
  auto f = gguf::File::open(o.in);
  const std::string arch = f->get_str("general.architecture");
  const int n_layer = int(f->get_int(arch + ".block_count"));
  const int64_t n_head = f->get_int_opt(arch + ".attention.head_count").value_or(1);
  const int64_t n_head_kv = f->get_int_opt(arch + ".attention.head_count_kv").value_or(n_head);
  const int n_gqa = n_head_kv > 0 ? int(n_head / n_head_kv) : 1;
  const bool has_output = f->find_tensor("output.weight") != nullptr;

  QuantizeResult res;
  gguf::Writer w;
  for (const auto& [k, v] : f->metadata()) w.set(k, v);  // general.alignment included
  w.set("general.file_type", gguf::Value::u32(o.mix.file_type));
  w.set("general.quantization_version", gguf::Value::u32(2));

  ThreadPool pool(o.threads);
  int requantized = 0;
  std::map<std::string, int> fallbacks;  // 32-block type -> tensors whose rows 256 does not divide
  for (const gguf::TensorInfo& t : f->tensors()) {
    DType type = t.type;
    const bool weight2d = t.ne.size() >= 2 && t.name.size() > 7 && t.name.ends_with(".weight");
    if (weight2d) {
      bool fell_back = false;
      type = mix_type(o.mix, {t.name, t.ne[0], n_layer, n_gqa, has_output}, &fell_back);
      if (t.name == "output.weight" && o.output_type) type = *o.output_type, fell_back = false;
      if (t.name == "token_embd.weight" && o.embed_type) type = *o.embed_type, fell_back = false;
      if (fell_back) ++fallbacks[dtype_name(type)];
      if (t.ne[0] % type_info(type).block != 0)
        LMF_FAIL("tensor '", t.name, "': rows of ", t.ne[0], " cannot be ", dtype_name(type),
                 " (blocks of ", type_info(type).block, ")");
    }
    res.bytes_in += t.nbytes;
    if (type == t.type) {
      w.add_tensor(t.name, t.type, t.ne, t.data);
    } else {
      if (!is_float(t.type)) {
        if (!o.allow_requantize)
          LMF_FAIL("tensor '", t.name, "' is already ", dtype_name(t.type),
                   ": quantizing it again to ", dtype_name(type),
                   " loses quality (pass --allow-requantize to do it anyway, or start from an F16/BF16/F32 file)");
        ++requantized;
      }
      w.add_tensor(t.name, type, t.ne, [&pool, &t, type](uint8_t* dst) { quantize_tensor(t, type, dst, pool); });
    }
    auto& slot = res.by_type[dtype_name(type)];
    slot.first += 1;
    slot.second += uint64_t(t.rows()) * row_bytes(type, t.ne[0]);
  }
  if (requantized)
    res.notes.push_back("warning: " + std::to_string(requantized) +
                        " tensors were quantized from an already quantized type (quality loss)");
  if (!fallbacks.empty()) {
    int n = 0;
    std::string by;
    for (const auto& [name, c] : fallbacks) n += c, by += (by.empty() ? "" : ", ") + name + " " + std::to_string(c);
    res.notes.push_back("note: " + std::to_string(n) + " tensors have rows that blocks of 256 do not divide, " +
                        "written in 32-block types instead (" + by + "), as llama-quantize does");
  }
  res.n_tensors = w.tensor_count();
  res.bytes_out = w.data_bytes();
  Progress prog("quantize " + fs::path(o.out).filename().string(), res.bytes_out, o.progress);
  w.write(o.out, [&](uint64_t bytes, int64_t done, int64_t total) { prog.update(bytes, done, total); });
  prog.finish();
  return res;
}

}  // namespace lmf
