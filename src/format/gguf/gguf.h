// GGUF v3 reader (mmap, zero-copy tensor views) and writer, interchangeable with llama.cpp.
// Every error names the file and says what was expected and what was found.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "format/quant/types.h"
#include "util/mmap.h"

namespace lmf::gguf {

enum class VType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STR = 8, ARR = 9, U64 = 10, I64 = 11, F64 = 12,
};
const char* vtype_name(VType t);

struct Value;
struct Array {
  VType elem = VType::U8;
  std::vector<Value> items;
};

// A metadata value. Integers are stored widened (uint64 for unsigned, int64 for signed) and
// keep their GGUF type so a read-then-write round trip is exact.
struct Value {
  VType type = VType::U8;
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> v;

  static Value u32(uint32_t x) { return {VType::U32, uint64_t(x)}; }
  static Value u64(uint64_t x) { return {VType::U64, x}; }
  static Value i32(int32_t x) { return {VType::I32, int64_t(x)}; }
  static Value f32(float x) { return {VType::F32, double(x)}; }
  static Value boolean(bool x) { return {VType::BOOL, x}; }
  static Value str(std::string s) { return {VType::STR, std::move(s)}; }
  static Value arr(VType elem, std::vector<Value> items) { return {VType::ARR, Array{elem, std::move(items)}}; }
  static Value strs(const std::vector<std::string>& s);
  static Value i32s(const std::vector<int32_t>& s);
  static Value f32s(const std::vector<float>& s);

  // Accessors throw lmf::Error ("expected an integer, got string") on a type mismatch.
  bool is_int() const;
  int64_t as_int() const;
  double as_float() const;  // any numeric type
  bool as_bool() const;
  const std::string& as_str() const;
  const Array& as_arr() const;
};

struct TensorInfo {
  std::string name;
  DType type = DType::F32;
  std::vector<int64_t> ne;  // GGML order: ne[0] is the innermost (contiguous) dimension
  uint64_t offset = 0;      // relative to the start of the data section
  size_t nbytes = 0;
  const uint8_t* data = nullptr;  // into the mapping (reader only)

  int64_t nelements() const;
  int64_t rows() const { return ne.empty() ? 1 : nelements() / ne[0]; }
};

class File {
 public:
  // Parses and validates the whole header; throws lmf::Error "<path>: <problem>".
  static std::unique_ptr<File> open(const std::string& path);
  // Parses a file image already in memory (fuzzing, tests). `name` stands in for the path in
  // errors; the bytes are not copied and must outlive the File.
  static std::unique_ptr<File> open_memory(const std::string& name, const uint8_t* data, size_t size);

  const std::string& path() const { return name_; }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  size_t file_size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the data section

  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  // Required getters: a missing key is "<path>: missing required key 'qwen3.block_count'".
  const Value& get(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;
  std::string get_str(std::string_view key) const;
  std::optional<int64_t> get_int_opt(std::string_view key) const;
  std::optional<double> get_float_opt(std::string_view key) const;
  std::optional<std::string> get_str_opt(std::string_view key) const;
  std::optional<bool> get_bool_opt(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;

 private:
  File() = default;
  MappedFile map_;  // empty for open_memory
  std::string name_;
  const uint8_t* base_ = nullptr;  // [size_] bytes: the mapping or the caller's buffer
  size_t size_ = 0;
  uint64_t data_offset_ = 0;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  std::vector<std::pair<std::string, Value>> kv_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
  friend struct FileParser;
};

// Writer. Usage: set() metadata, add_tensor() each tensor (data now, or a producer called
// during write), then write(path). The file is written to "<path>.tmp" and renamed only when
// complete, so a failed write never leaves a partial file at path.
class Writer {
 public:
  using Producer = std::function<void(uint8_t* dst)>;  // fills exactly nbytes

  void set(std::string key, Value v);  // replaces an existing key, keeps first position
  void add_tensor(std::string name, DType type, std::vector<int64_t> ne, const void* data);
  void add_tensor(std::string name, DType type, std::vector<int64_t> ne, Producer produce);
  void set_alignment(size_t a);
  // progress(bytes_done, tensors_done, tensors_total) after each tensor.
  void write(const std::string& path,
             const std::function<void(uint64_t, int64_t, int64_t)>& progress = nullptr) const;

  size_t tensor_count() const { return tensors_.size(); }
  uint64_t data_bytes() const;

 private:
  struct Pending {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
    const void* data = nullptr;
    Producer produce;
  };
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<Pending> tensors_;
  size_t alignment_ = 32;
};

}  // namespace lmf::gguf
