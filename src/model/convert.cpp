// The conversion driver: config + checkpoint + tokenizer -> metadata and a plan, then a
// streaming GGUF write. The writer calls one producer per tensor in file order; each producer
// converts its tensor straight into the writer's buffer, rows split over the thread pool, so
// memory stays at one output tensor plus one float32 row per thread.
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "format/quant/quantize.h"
#include "model/arch_table.h"
#include "model/convert.h"
#include "tokenizer/tokenizer.h"
#include "util/mmap.h"
#include "util/progress.h"
#include "util/status.h"
#include "util/threadpool.h"

namespace lmf {

namespace fs = std::filesystem;

namespace {

// generation_config.json "eos_token_id" (an id or a list); empty when absent.
std::vector<int32_t> generation_eos(const fs::path& p) {
  std::vector<int32_t> out;
  if (!fs::exists(p)) return out;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(p.string()));
  } catch (const nlohmann::json::exception& e) {
    LMF_FAIL(p.string(), ": not valid JSON: ", e.what());
  }
  if (!j.is_object() || !j.contains("eos_token_id")) return out;
  const auto& v = j["eos_token_id"];
  for (const auto& x : v.is_array() ? v : nlohmann::json::array({v})) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0)
      LMF_FAIL(p.string(), ": eos_token_id must hold token ids, got ", v.dump());
    out.push_back(x.get<int32_t>());
  }
  return out;
}

// The tokenizer keys (llama.cpp's tokenizer.ggml.*), or a note when the folder has none.
bool add_tokenizer(gguf::Writer& w, const fs::path& dir, const HfConfig& cfg, std::vector<std::string>& notes) {
  if (!fs::exists(dir / "tokenizer.json")) {
    notes.push_back("warning: no tokenizer.json in " + dir.string() +
                    ": the GGUF gets no tokenizer (token ids still work: lmfuse logits --tokens)");
    return false;
  }
  auto tok = Tokenizer::from_hf_path(dir.string());
  if (tok->n_vocab() > cfg.hp.n_vocab)
    LMF_FAIL(dir.string(), "/tokenizer.json: ", tok->n_vocab(), " tokens, more than config.json's vocab_size ",
             cfg.hp.n_vocab, " (the embedding has only that many rows)");
  tok->to_gguf(w, int32_t(cfg.hp.n_vocab));  // pads with [PAD<i>] to the embedding's rows
  // Ids the tokenizer files did not name come from generation_config.json / config.json, as
  // llama.cpp's SpecialVocab does. eos: generation_config lists every end-of-generation id; the
  // first is the primary one (llama.cpp recognizes the others by their text at load).
  auto in_vocab = [&](int32_t id) { return id >= 0 && id < cfg.hp.n_vocab; };
  if (tok->eos() < 0) {
    std::vector<int32_t> eos = generation_eos(dir / "generation_config.json");
    if (eos.empty()) eos = cfg.eos_ids;
    if (!eos.empty() && in_vocab(eos[0])) w.set("tokenizer.ggml.eos_token_id", gguf::Value::u32(uint32_t(eos[0])));
  }
  if (tok->bos() < 0 && !cfg.bos_ids.empty() && in_vocab(cfg.bos_ids[0]))
    w.set("tokenizer.ggml.bos_token_id", gguf::Value::u32(uint32_t(cfg.bos_ids[0])));
  return true;
}

}  // namespace

void convert_tensor(const TensorPlan& p, uint8_t* dst, bool better_rounding, ThreadPool& pool) {
  const safetensors::Tensor& src = *p.src;
  const int64_t cols = p.ne[0];
  const int64_t rows = src.numel() / cols;
  const size_t rb = row_bytes(p.type, cols);
  const bool search = better_rounding && (p.type == DType::Q4_0 || p.type == DType::Q4_1);
  pool.parallel_for(rows, [&](int, int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(cols));  // [cols] float32 scratch, one per thread
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t sr = p.permute_heads ? llama_permuted_src_row(r, rows, p.permute_heads) : r;
      safetensors::to_f32(src, sr * cols, cols, row.data());
      for (int64_t i = 0; i < cols; ++i)
        if (!std::isfinite(row[size_t(i)]))
          LMF_FAIL(src.file, ": tensor '", p.hf_name, "' holds ", row[size_t(i)], " at row ", sr, ", column ", i,
                   " (corrupted checkpoint?)");
      if (search) quantize_row_search(p.type, row.data(), dst + size_t(r) * rb, cols);
      else quantize_row(p.type, row.data(), dst + size_t(r) * rb, cols);
    }
  });
}

ConvertResult convert_hf(const ConvertOptions& o) {
  const fs::path dir(o.in_dir);
  if (o.out.empty()) LMF_FAIL("no output file given");
  if (fs::exists(o.out) && !o.force) LMF_FAIL(o.out, ": already exists (pass --force to overwrite it)");
  if (fs::is_directory(o.out)) LMF_FAIL(o.out, ": is a directory, expected a file name");
  if (!fs::is_directory(dir)) LMF_FAIL(o.in_dir, ": not a directory (expected a Hugging Face checkpoint folder)");

  ConvertResult res;
  const HfConfig cfg = parse_hf_config(read_file((dir / "config.json").string()), (dir / "config.json").string());
  const safetensors::Checkpoint ck = safetensors::Checkpoint::open_dir(o.in_dir);
  const std::vector<TensorPlan> plan = plan_tensors(cfg, ck, o.types, &res.notes);

  gguf::Writer w;
  std::string name = fs::absolute(dir).lexically_normal().filename().string();
  if (name.empty()) name = fs::absolute(dir).lexically_normal().parent_path().filename().string();
  write_hparams(w, cfg, o.types.type, name);
  if (o.types.mix) w.set("general.file_type", gguf::Value::u32(o.types.mix->file_type));
  res.tokenizer = add_tokenizer(w, dir, cfg, res.notes);

  ThreadPool pool(o.threads);
  const auto& ff = cfg.hp.rope_freq_factors;
  if (!ff.empty())  // Llama 3.1+ RoPE scaling: F32 whatever the weight type, first, as llama.cpp writes it
    w.add_tensor(tname::kRopeFreqs, DType::F32, {int64_t(ff.size())}, ff.data());
  for (const TensorPlan& p : plan)
    w.add_tensor(p.gguf_name, p.type, p.ne,
                 [&pool, &p, better = o.better_rounding](uint8_t* dst) { convert_tensor(p, dst, better, pool); });
  res.n_tensors = w.tensor_count();
  res.bytes = w.data_bytes();

  Progress prog("convert " + fs::path(o.out).filename().string(), res.bytes, o.progress);
  w.write(o.out, [&](uint64_t bytes, int64_t done, int64_t total) { prog.update(bytes, done, total); });
  prog.finish();
  return res;
}

}  // namespace lmf
