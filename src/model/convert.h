// Hugging Face checkpoint -> GGUF conversion (`lmfuse convert`). Names, metadata and the llama
// Q/K row permutation follow llama.cpp's convert_hf_to_gguf.py, so the output runs in both
// engines. Tensors stream from the mmap'd safetensors through the quantizers into the GGUF
// writer one at a time (rows of a tensor are split over threads), so extra memory is one output
// tensor plus a row of float32 per thread.
#pragma once
#include "model/quant_mix.h"
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "format/gguf/gguf.h"
#include "format/quant/types.h"
#include "format/safetensors/safetensors.h"
#include "model/model.h"

namespace lmf {

// Hyper-parameters from config.json, already validated.
struct HfConfig {
  std::string path;       // config.json (for errors)
  std::string hf_arch;    // "Qwen3ForCausalLM"
  HParams hp;             // arch, arch_name, sizes, eps, rope; n_ctx_train = max_position_embeddings
  bool has_head_dim = false;  // config.json states head_dim (llama.cpp then writes key/value_length)
  std::optional<bool> tie_word_embeddings;  // absent: decided by whether lm_head.weight exists
  std::optional<std::string> torch_dtype;   // "float32" | "float16" | "bfloat16"
  std::vector<int32_t> bos_ids, eos_ids;    // config.json bos/eos_token_id (int or list)
};

// Parses config.json text; `path` names it in errors. Unsupported architectures and
// inconsistent sizes are errors.
HfConfig parse_hf_config(const std::string& json_text, const std::string& path);

// One output tensor: where it comes from and how it is written.
struct TensorPlan {
  std::string hf_name, gguf_name;
  const safetensors::Tensor* src = nullptr;
  std::vector<int64_t> ne;   // GGML order: ne[0] = the HF tensor's innermost dimension
  DType type = DType::F32;
  int64_t permute_heads = 0;  // llama attn_q/attn_k: row permutation over this many heads (0: none)
};

struct TypeChoice {
  DType type = DType::Q8_0;            // 2-D weights (the mix's base type when mix is set)
  std::optional<QuantMix> mix;         // a K-quant mix (quant_mix.h) picks each 2-D weight's type
  std::optional<DType> output_type;    // output.weight (default: type, or the mix's)
  std::optional<DType> embed_type;     // token_embd.weight (default: type, or the mix's)
};

// Maps every checkpoint tensor to its GGUF name, shape and type, in llama.cpp's order. Errors:
// a tensor the architecture does not know, a missing tensor, a shape or dtype that disagrees
// with config.json (each names the tensor). `notes` collects informational lines (fallbacks).
std::vector<TensorPlan> plan_tensors(const HfConfig& cfg, const safetensors::Checkpoint& ck, const TypeChoice& tc,
                                     std::vector<std::string>* notes = nullptr);

// llama.cpp's hyper-parameter keys for cfg (general.* included), as convert_hf_to_gguf writes them.
void write_hparams(gguf::Writer& w, const HfConfig& cfg, DType file_type, const std::string& name);
uint32_t llama_file_type(DType t);  // LLAMA_FTYPE_MOSTLY_* for general.file_type

// Source row of GGUF row r after llama's permutation (HF rotate-half rows (i, i + d/2) of each
// head become rows (2i, 2i+1)); rows = n_head * head_dim.
int64_t llama_permuted_src_row(int64_t r, int64_t rows, int64_t n_head);

// Fills dst (row_bytes(p.type, ne[0]) * rows bytes) with the converted tensor; rows are split
// over `threads` threads. Throws if the source holds NaN or infinity (naming tensor and row).
class ThreadPool;
void convert_tensor(const TensorPlan& p, uint8_t* dst, bool better_rounding, ThreadPool& pool);

struct ConvertOptions {
  std::string in_dir, out;
  TypeChoice types;
  int threads = 0;  // 0: all cores
  bool force = false;
  bool better_rounding = false;
  bool progress = true;
};

struct ConvertResult {
  size_t n_tensors = 0;
  uint64_t bytes = 0;
  bool tokenizer = false;
  std::vector<std::string> notes;  // fallbacks and warnings, one line each
};

// The whole conversion. Writes "<out>.tmp" and renames it to out only when complete.
ConvertResult convert_hf(const ConvertOptions& o);

}  // namespace lmf
