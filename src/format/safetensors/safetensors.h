// Safetensors reader (mmap, zero-copy tensor views), single files and sharded checkpoints.
// Format: u64 little-endian header size N, N bytes of JSON {name: {dtype, shape, data_offsets}},
// then the data section; offsets are relative to the data section. Everything the header claims
// is validated at open (dtype, shape vs byte size, offsets inside the file, no overlaps), so a
// corrupted or truncated file fails before any conversion starts, naming the file and tensor.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "util/mmap.h"

namespace lmf::safetensors {

// Only the float types a language model checkpoint stores its weights in.
enum class SType { F32, F16, BF16 };
const char* stype_name(SType t);  // "F32", as safetensors spells it
size_t stype_size(SType t);

struct Tensor {
  std::string name;
  SType dtype = SType::F32;
  std::vector<int64_t> shape;  // row-major, as PyTorch: shape[0] is the outermost dimension
  const uint8_t* data = nullptr;  // into the mapping; not necessarily aligned
  size_t nbytes = 0;
  std::string file;  // the file holding it (for error messages)

  int64_t numel() const;
  int64_t cols() const { return shape.empty() ? 1 : shape.back(); }  // innermost dimension
  int64_t rows() const { return cols() ? numel() / cols() : 0; }
};

// Converts elements [begin, begin + n) of t to float32 (exact for every SType).
void to_f32(const Tensor& t, int64_t begin, int64_t n, float* dst);

class File {
 public:
  static std::unique_ptr<File> open(const std::string& path);
  // Parses an image already in memory (tests); bytes must outlive the File.
  static std::unique_ptr<File> open_memory(const std::string& name, const uint8_t* data, size_t size);

  const std::string& path() const { return name_; }
  const std::vector<Tensor>& tensors() const { return tensors_; }  // header order
  const Tensor* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return meta_; }  // "__metadata__"

 private:
  File() = default;
  void parse(const uint8_t* data, size_t size);
  MappedFile map_;
  std::string name_;
  std::vector<Tensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> meta_;
};

// A Hugging Face checkpoint folder: model.safetensors, or shards listed in
// model.safetensors.index.json (every listed shard must exist and hold what the index says).
class Checkpoint {
 public:
  static Checkpoint open_dir(const std::string& dir);

  const Tensor* find(std::string_view name) const;
  std::vector<const Tensor*> tensors() const;  // shard order, then header order
  const std::vector<std::unique_ptr<File>>& files() const { return files_; }

 private:
  std::vector<std::unique_ptr<File>> files_;
  std::unordered_map<std::string, const Tensor*> index_;
  void add(std::unique_ptr<File> f);
};

}  // namespace lmf::safetensors
