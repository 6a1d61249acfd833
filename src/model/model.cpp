#include "model/model.h"

#include <filesystem>
#include <map>

#include "model/arch_table.h"
#include "util/status.h"

namespace lmf {

std::unique_ptr<Model> Model::load(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec) && std::filesystem::exists(std::filesystem::path(path) / "config.json", ec))
    LMF_FAIL(path, ": a Hugging Face checkpoint folder; convert it to GGUF first: lmfuse convert ", path,
             " -o model.gguf");
  auto m = std::make_unique<Model>();
  m->file = gguf::File::open(path);
  const gguf::File& f = *m->file;
  std::string arch = f.get_str(key::kArch);
  const ArchDef* def = nullptr;
  std::string supported;
  for (const auto& d : arch_table()) {
    supported += cat(supported.empty() ? "" : ", ", d.name);
    if (arch == d.name) def = &d;
  }
  if (!def) LMF_FAIL(path, ": unsupported architecture '", arch, "' (supported: ", supported, ")");
  m->hp.arch = def->arch;
  m->hp.arch_name = arch;
  def->read_hparams(f, m->hp);
  TensorBinder b(f);
  def->bind(b, m->hp, *m);
  b.check_all_used();
  m->tp.vocab_end = m->hp.n_vocab;
  for (const Weight* w : {&m->tok_embd, &m->output})
    if (type_info(w->type).quantized && w->cols % type_info(w->type).block != 0)
      LMF_FAIL(path, ": tensor '", w->name, "' row length ", w->cols, " is not a multiple of ",
               type_info(w->type).block, " (the block of ", dtype_name(w->type), ")");
  return m;
}

std::vector<const Weight*> Model::weights() const {
  std::vector<const Weight*> w{&tok_embd, &output_norm};
  if (output.data != tok_embd.data || output.nbytes != tok_embd.nbytes) w.push_back(&output);
  for (const auto& L : layers)
    for (const Weight* x : {&L.attn_norm, &L.wq, &L.wk, &L.wv, &L.bq, &L.bk, &L.bv, &L.q_norm, &L.k_norm, &L.wo,
                            &L.ffn_norm, &L.w_gate, &L.w_up, &L.w_down})
      if (x->data) w.push_back(x);
  return w;
}

// A loaded model counts its file (rope_freqs included); a tensor-parallel rank its own slices.
uint64_t Model::weight_bytes() const {
  uint64_t n = 0;
  if (!file) {
    for (const Weight* w : weights()) n += w->nbytes;
    return n;
  }
  for (const auto& t : file->tensors()) n += t.nbytes;
  return n;
}

uint64_t Model::param_count() const {
  uint64_t n = 0;
  if (!file) {
    for (const Weight* w : weights()) n += uint64_t(w->rows * w->cols);
    return n;
  }
  for (const auto& t : file->tensors()) n += uint64_t(t.nelements());
  return n;
}

bool Model::quantized_matmuls() const {
  auto quantized = [](const Weight& w) { return type_info(w.type).quantized; };
  if (quantized(output)) return true;
  for (const auto& L : layers)
    for (const Weight* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down})
      if (quantized(*w)) return true;
  return false;
}

std::string Model::type_summary() const {
  std::map<std::string, uint64_t> bytes;
  if (file) {
    for (const auto& t : file->tensors())
      if (t.ne.size() == 2) bytes[dtype_name(t.type)] += t.nbytes;
  } else {
    for (const Weight* w : weights())
      if (w->rows > 1) bytes[dtype_name(w->type)] += w->nbytes;
  }
  std::string best;
  uint64_t most = 0;
  for (auto& [k, v] : bytes)
    if (v > most) most = v, best = k;
  for (auto& c : best) c = char(toupper(c));
  return best;
}

}  // namespace lmf
