// GGUF v2/v3 reader. The whole header is parsed and validated up front so that everything after
// open() can trust the tensor table: every count is checked against the bytes left before
// anything is allocated, and every tensor's data range is checked against the file.
#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>

#include "format/gguf/gguf.h"
#include "util/status.h"

static_assert(std::endian::native == std::endian::little, "GGUF is read as little-endian");

namespace lmf::gguf {

namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr int kMaxDims = 4;         // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 16;  // arrays of arrays: bounded so a crafted file cannot blow the stack
constexpr size_t kMinKvBytes = 8 + 4 + 1;          // key length, value type, smallest value
constexpr size_t kMinTensorBytes = 8 + 4 + 4 + 8;  // name length, n_dims, type, offset

// Smallest encoding of one array element of type t (strings: their length; arrays: type+length).
size_t min_elem_bytes(VType t) {
  switch (t) {
    case VType::U8: case VType::I8: case VType::BOOL: return 1;
    case VType::U16: case VType::I16: return 2;
    case VType::U32: case VType::I32: case VType::F32: return 4;
    case VType::U64: case VType::I64: case VType::F64: case VType::STR: return 8;
    case VType::ARR: return 12;
  }
  return 1;
}

std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

std::string supported_list() {
  std::string s;
  for (DType t : all_dtypes()) s += (s.empty() ? "" : ", ") + std::string(dtype_name(t));
  return s;
}

}  // namespace

struct FileParser {
  File& f;
  const uint8_t* p;
  size_t size;
  size_t pos = 0;

  template <class... A>
  [[noreturn]] void fail(const A&... a) const {
    LMF_FAIL(f.name_, ": ", a...);
  }
  size_t left() const { return size - pos; }

  void need(size_t n, const std::string& what) const {
    if (left() < n)
      fail("truncated header: expected ", n, " bytes for ", what, " at offset ", pos, ", got ",
           left(), " (file size ", size, ")");
  }
  template <class T>
  T rd(const std::string& what) {
    need(sizeof(T), what);
    T x;
    std::memcpy(&x, p + pos, sizeof(T));
    pos += sizeof(T);
    return x;
  }
  std::string rd_str(const std::string& what) {
    uint64_t n = rd<uint64_t>("length of " + what);
    if (n > left())
      fail("string length ", n, " of ", what, " at offset ", pos - 8, " is larger than the ",
           left(), " bytes left in the file (truncated or corrupt file?)");
    std::string s(reinterpret_cast<const char*>(p + pos), size_t(n));
    pos += size_t(n);
    return s;
  }
  VType rd_vtype(const std::string& what) {
    uint32_t t = rd<uint32_t>("value type of " + what);
    if (t > uint32_t(VType::F64)) fail(what, ": unknown metadata value type ", t, " (expected 0..12)");
    return VType(t);
  }

  Value rd_value(VType t, const std::string& what, int depth) {
    switch (t) {
      case VType::U8: return {t, uint64_t(rd<uint8_t>(what))};
      case VType::I8: return {t, int64_t(rd<int8_t>(what))};
      case VType::U16: return {t, uint64_t(rd<uint16_t>(what))};
      case VType::I16: return {t, int64_t(rd<int16_t>(what))};
      case VType::U32: return {t, uint64_t(rd<uint32_t>(what))};
      case VType::I32: return {t, int64_t(rd<int32_t>(what))};
      case VType::U64: return {t, rd<uint64_t>(what)};
      case VType::I64: return {t, rd<int64_t>(what)};
      case VType::F32: return {t, double(rd<float>(what))};
      case VType::F64: return {t, rd<double>(what)};
      case VType::BOOL: {
        uint8_t b = rd<uint8_t>(what);
        if (b > 1) fail(what, ": invalid bool value ", int(b), " at offset ", pos - 1, " (expected 0 or 1)");
        return {t, b == 1};
      }
      case VType::STR: return {t, rd_str(what)};
      case VType::ARR: {
        if (depth >= kMaxArrayDepth)
          fail(what, ": arrays nested deeper than ", kMaxArrayDepth, " levels");
        Array a;
        a.elem = rd_vtype("elements of " + what);
        uint64_t n = rd<uint64_t>("length of " + what);
        size_t most = left() / min_elem_bytes(a.elem);
        if (n > most)
          fail(what, ": array length ", n, " of ", vtype_name(a.elem), " is larger than the file could hold (at most ",
               most, " in the ", left(), " bytes left; truncated or corrupt file?)");
        a.items.reserve(size_t(n));
        for (uint64_t i = 0; i < n; ++i) a.items.push_back(rd_value(a.elem, what + "[" + std::to_string(i) + "]", depth + 1));
        return {t, std::move(a)};
      }
    }
    fail(what, ": unknown metadata value type ", uint32_t(t));
  }

  void parse() {
    need(4, "magic");
    if (std::memcmp(p, kMagic, 4) != 0) {
      std::string got;
      for (int i = 0; i < 4; ++i) got += (p[i] >= 32 && p[i] < 127) ? char(p[i]) : '?';
      fail("not a GGUF file: expected magic 'GGUF', got '", got, "'");
    }
    pos = 4;
    f.version_ = rd<uint32_t>("version");
    if (f.version_ != 2 && f.version_ != 3)
      fail("unsupported GGUF version ", f.version_, " (expected 2 or 3)",
           __builtin_bswap32(f.version_) <= 3 ? "; the file looks big-endian, which is not supported" : "");
    uint64_t n_tensors = rd<uint64_t>("tensor count");
    uint64_t n_kv = rd<uint64_t>("metadata count");
    if (n_kv > left() / kMinKvBytes)
      fail("metadata count ", n_kv, " is larger than the file could hold (at most ", left() / kMinKvBytes,
           " in the ", left(), " bytes left; truncated or corrupt file?)");
    if (n_tensors > left() / kMinTensorBytes)
      fail("tensor count ", n_tensors, " is larger than the file could hold (at most ",
           left() / kMinTensorBytes, " in the ", left(), " bytes left; truncated or corrupt file?)");

    f.kv_.reserve(size_t(n_kv));
    for (uint64_t i = 0; i < n_kv; ++i) {
      std::string key = rd_str("key of metadata entry #" + std::to_string(i));
      std::string what = "key '" + key + "'";
      VType t = rd_vtype(what);
      Value v = rd_value(t, what, 0);
      auto [it, fresh] = f.kv_index_.emplace(key, f.kv_.size());
      if (!fresh) fail("duplicate metadata key '", key, "' (entries #", it->second, " and #", i, ")");
      f.kv_.emplace_back(std::move(key), std::move(v));
    }
    read_alignment();

    if (n_tensors > left() / kMinTensorBytes)
      fail("tensor count ", n_tensors, " is larger than the file could hold (at most ",
           left() / kMinTensorBytes, " in the ", left(), " bytes left; truncated or corrupt file?)");
    f.tensors_.reserve(size_t(n_tensors));
    for (uint64_t i = 0; i < n_tensors; ++i) f.tensors_.push_back(rd_tensor_info(i));

    // The data section starts at the first aligned offset after the header.
    const uint64_t a = f.alignment_;
    f.data_offset_ = (uint64_t(pos) + a - 1) / a * a;
    check_tensor_ranges();
  }

  void read_alignment() {
    auto it = f.kv_index_.find("general.alignment");
    if (it == f.kv_index_.end()) return;
    const Value& v = f.kv_[it->second].second;
    if (!v.is_int()) fail("general.alignment: expected an unsigned integer, got ", vtype_name(v.type));
    // Negative values show up as huge unsigned ones and fail the range check below.
    uint64_t a = std::holds_alternative<uint64_t>(v.v) ? std::get<uint64_t>(v.v) : uint64_t(std::get<int64_t>(v.v));
    if (a == 0 || !std::has_single_bit(a) || a > (uint64_t(1) << 30))
      fail("general.alignment must be a power of two > 0 (and at most 2^30), got ",
           std::holds_alternative<int64_t>(v.v) ? std::to_string(std::get<int64_t>(v.v)) : std::to_string(a));
    f.alignment_ = size_t(a);
  }

  TensorInfo rd_tensor_info(uint64_t i) {
    TensorInfo t;
    t.name = rd_str("name of tensor #" + std::to_string(i));
    const std::string what = "tensor '" + t.name + "'";
    uint32_t n_dims = rd<uint32_t>("n_dims of " + what);
    if (n_dims > kMaxDims) fail(what, ": n_dims ", n_dims, " exceeds the maximum of ", kMaxDims);
    int64_t n = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      int64_t x = rd<int64_t>("dimension " + std::to_string(d) + " of " + what);
      if (x <= 0) fail(what, ": dimension ", d, " is ", x, ", expected > 0");
      t.ne.push_back(x);
      if (__builtin_mul_overflow(n, x, &n))
        fail(what, ": element count of shape ", shape_str(t.ne), "... overflows int64");
    }
    uint32_t type = rd<uint32_t>("type of " + what);
    if (!dtype_supported(type))
      fail(what, ": unsupported type ", type, " (", ggml_type_name(type), "); supported: ", supported_list());
    t.type = DType(type);
    const TypeInfo& ti = type_info(t.type);
    const int64_t ne0 = t.ne.empty() ? 1 : t.ne[0];
    if (ne0 % ti.block != 0)
      fail(what, ": row size ", ne0, " is not a multiple of the block size ", ti.block, " of ", ti.name);
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(uint64_t(row_bytes(t.type, ne0)), uint64_t(n / ne0), &bytes) ||
        bytes > uint64_t(SIZE_MAX))
      fail(what, ": byte size of shape ", shape_str(t.ne), " overflows");
    t.nbytes = size_t(bytes);
    t.offset = rd<uint64_t>("data offset of " + what);
    if (t.offset % f.alignment_ != 0)
      fail(what, ": data offset ", t.offset, " is not a multiple of the alignment ", f.alignment_);
    if (!f.tensor_index_.emplace(t.name, size_t(i)).second) fail("duplicate tensor name '", t.name, "'");
    return t;
  }

  void check_tensor_ranges() {
    const uint64_t data_size = size > f.data_offset_ ? size - f.data_offset_ : 0;
    for (TensorInfo& t : f.tensors_) {
      if (t.offset >= data_size)
        fail("tensor '", t.name, "': data offset ", t.offset, " is out of bounds: the data section at offset ",
             f.data_offset_, " holds ", data_size, " bytes (file truncated?)");
      if (t.nbytes > data_size - t.offset)
        fail("tensor '", t.name, "': data [", t.offset, ", ", t.offset + t.nbytes,
             ") extends past end of file: the data section holds ", data_size, " bytes (file truncated?)");
      t.data = p + f.data_offset_ + t.offset;
    }
    std::vector<size_t> order(f.tensors_.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return f.tensors_[a].offset < f.tensors_[b].offset; });
    for (size_t k = 1; k < order.size(); ++k) {
      const TensorInfo& a = f.tensors_[order[k - 1]];
      const TensorInfo& b = f.tensors_[order[k]];
      if (a.offset + a.nbytes > b.offset)
        fail("tensors '", a.name, "' [", a.offset, ", ", a.offset + a.nbytes, ") and '", b.name, "' [",
             b.offset, ", ", b.offset + b.nbytes, ") overlap in the data section");
    }
  }
};

std::unique_ptr<File> File::open(const std::string& path) {
  std::unique_ptr<File> f(new File());
  f->map_ = MappedFile(path);
  f->name_ = path;
  f->base_ = f->map_.data();
  f->size_ = f->map_.size();
  FileParser{*f, f->base_, f->size_}.parse();
  return f;
}

std::unique_ptr<File> File::open_memory(const std::string& name, const uint8_t* data, size_t size) {
  std::unique_ptr<File> f(new File());
  f->name_ = name;
  f->base_ = data;
  f->size_ = size;
  FileParser{*f, data, size}.parse();
  return f;
}

const Value* File::find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const Value& File::get(std::string_view key) const {
  const Value* v = find(key);
  if (!v) LMF_FAIL(path(), ": missing required key '", key, "'");
  return *v;
}

namespace {
// Runs an accessor and prefixes a type mismatch with the file and key.
template <class Fn>
auto typed(const File& f, std::string_view key, const Value& v, Fn fn) -> decltype(fn(v)) {
  try {
    return fn(v);
  } catch (const Error& e) {
    LMF_FAIL(f.path(), ": key '", key, "': ", e.what());
  }
}
}  // namespace

int64_t File::get_int(std::string_view key) const {
  return typed(*this, key, get(key), [](const Value& v) { return v.as_int(); });
}
double File::get_float(std::string_view key) const {
  return typed(*this, key, get(key), [](const Value& v) { return v.as_float(); });
}
std::string File::get_str(std::string_view key) const {
  return typed(*this, key, get(key), [](const Value& v) { return v.as_str(); });
}
std::optional<int64_t> File::get_int_opt(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  return typed(*this, key, *v, [](const Value& x) { return x.as_int(); });
}
std::optional<double> File::get_float_opt(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  return typed(*this, key, *v, [](const Value& x) { return x.as_float(); });
}
std::optional<std::string> File::get_str_opt(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  return typed(*this, key, *v, [](const Value& x) { return x.as_str(); });
}
std::optional<bool> File::get_bool_opt(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  return typed(*this, key, *v, [](const Value& x) { return x.as_bool(); });
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace lmf::gguf
