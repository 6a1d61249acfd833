// GGUF v3 writer. The header is serialized into memory first (so a bad value fails before any
// file exists); tensor data is then streamed one tensor at a time into "<path>.tmp", which is
// renamed to path only once everything is on disk.
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "format/gguf/gguf.h"
#include "util/status.h"

namespace lmf::gguf {

namespace {

constexpr size_t kDefaultAlignment = 32;

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

struct Bytes {
  std::vector<uint8_t> b;
  template <class T>
  void put(T x) {
    const auto* p = reinterpret_cast<const uint8_t*>(&x);
    b.insert(b.end(), p, p + sizeof(T));
  }
  void put_str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
};

// Integer payload of v, whichever alternative holds it, range-checked against [lo, hi].
template <class T>
T int_payload(const Value& v, const std::string& what) {
  using L = std::numeric_limits<T>;
  if (const auto* u = std::get_if<uint64_t>(&v.v)) {
    if (*u <= uint64_t(L::max())) return T(*u);
    LMF_FAIL(what, ": value ", *u, " does not fit ", vtype_name(v.type));
  }
  if (const auto* i = std::get_if<int64_t>(&v.v)) {
    bool ok = L::is_signed ? (*i >= int64_t(L::min()) && (sizeof(T) == 8 || *i <= int64_t(L::max())))
                           : (*i >= 0 && uint64_t(*i) <= uint64_t(L::max()));
    if (ok) return T(*i);
    LMF_FAIL(what, ": value ", *i, " does not fit ", vtype_name(v.type));
  }
  LMF_FAIL(what, ": expected an integer payload for ", vtype_name(v.type));
}

void put_value(Bytes& out, const Value& v, const std::string& what) {
  switch (v.type) {
    case VType::U8: out.put(int_payload<uint8_t>(v, what)); return;
    case VType::I8: out.put(int_payload<int8_t>(v, what)); return;
    case VType::U16: out.put(int_payload<uint16_t>(v, what)); return;
    case VType::I16: out.put(int_payload<int16_t>(v, what)); return;
    case VType::U32: out.put(int_payload<uint32_t>(v, what)); return;
    case VType::I32: out.put(int_payload<int32_t>(v, what)); return;
    case VType::U64: out.put(int_payload<uint64_t>(v, what)); return;
    case VType::I64: out.put(int_payload<int64_t>(v, what)); return;
    case VType::F32:
    case VType::F64: {
      const auto* d = std::get_if<double>(&v.v);
      if (!d) LMF_FAIL(what, ": expected a floating-point payload for ", vtype_name(v.type));
      if (v.type == VType::F32) out.put(float(*d));
      else out.put(*d);
      return;
    }
    case VType::BOOL: {
      const auto* b = std::get_if<bool>(&v.v);
      if (!b) LMF_FAIL(what, ": expected a bool payload");
      out.put<uint8_t>(*b ? 1 : 0);
      return;
    }
    case VType::STR: out.put_str(v.as_str()); return;
    case VType::ARR: {
      const Array& a = v.as_arr();
      out.put(uint32_t(a.elem));
      out.put<uint64_t>(a.items.size());
      for (size_t i = 0; i < a.items.size(); ++i) {
        std::string w = what + "[" + std::to_string(i) + "]";
        if (a.items[i].type != a.elem)
          LMF_FAIL(w, ": array of ", vtype_name(a.elem), " holds an item of type ", vtype_name(a.items[i].type));
        put_value(out, a.items[i], w);
      }
      return;
    }
  }
  LMF_FAIL(what, ": unknown value type ", uint32_t(v.type));
}

size_t check_alignment(uint64_t a) {
  if (a == 0 || !std::has_single_bit(a) || a > (uint64_t(1) << 30))
    LMF_FAIL("general.alignment must be a power of two > 0 (and at most 2^30), got ", a);
  return size_t(a);
}

// Bytes of one tensor; validates the shape the same way the reader does.
size_t tensor_bytes(const std::string& name, DType type, const std::vector<int64_t>& ne) {
  if (ne.size() > 4) LMF_FAIL("tensor '", name, "': n_dims ", ne.size(), " exceeds the maximum of 4");
  int64_t n = 1;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] <= 0) LMF_FAIL("tensor '", name, "': dimension ", d, " is ", ne[d], ", expected > 0");
    if (__builtin_mul_overflow(n, ne[d], &n)) LMF_FAIL("tensor '", name, "': element count overflows int64");
  }
  const TypeInfo& ti = type_info(type);
  const int64_t ne0 = ne.empty() ? 1 : ne[0];
  if (ne0 % ti.block != 0)
    LMF_FAIL("tensor '", name, "': row size ", ne0, " is not a multiple of the block size ", ti.block, " of ", ti.name);
  uint64_t bytes;
  if (__builtin_mul_overflow(uint64_t(row_bytes(type, ne0)), uint64_t(n / ne0), &bytes))
    LMF_FAIL("tensor '", name, "': byte size overflows");
  return size_t(bytes);
}

// A stdio file that reports every failure with its path and removes itself unless committed.
class TmpFile {
 public:
  explicit TmpFile(std::string path) : path_(std::move(path)) {
    fp_ = std::fopen(path_.c_str(), "wb");
    if (!fp_) LMF_FAIL(path_, ": cannot create: ", std::strerror(errno));
  }
  ~TmpFile() {
    if (fp_) std::fclose(fp_);
    if (!committed_) std::remove(path_.c_str());
  }
  void write(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, fp_) != n) LMF_FAIL(path_, ": write failed: ", std::strerror(errno));
  }
  void zeros(size_t n) {
    static const uint8_t z[256] = {};
    for (; n > 0; n -= std::min(n, sizeof(z))) write(z, std::min(n, sizeof(z)));
  }
  void commit(const std::string& final_path) {
    int rc = std::fclose(fp_);
    fp_ = nullptr;
    if (rc != 0) LMF_FAIL(path_, ": write failed on close: ", std::strerror(errno));
    if (std::rename(path_.c_str(), final_path.c_str()) != 0)
      LMF_FAIL(path_, ": cannot rename to ", final_path, ": ", std::strerror(errno));
    committed_ = true;
  }

 private:
  std::string path_;
  std::FILE* fp_ = nullptr;
  bool committed_ = false;
};

}  // namespace

void Writer::set(std::string key, Value v) {
  if (key == "general.alignment") {
    if (!v.is_int()) LMF_FAIL("general.alignment: expected an unsigned integer, got ", vtype_name(v.type));
    alignment_ = check_alignment(v.as_int() < 0 ? 0 : uint64_t(v.as_int()));
    v = Value::u32(uint32_t(alignment_));  // llama.cpp reads this key only as uint32
  }
  for (auto& [k, old] : kv_)
    if (k == key) {
      old = std::move(v);
      return;
    }
  kv_.emplace_back(std::move(key), std::move(v));
}

void Writer::set_alignment(size_t a) {
  alignment_ = check_alignment(a);
  // Readers assume 32 unless told otherwise, so only a non-default alignment needs the key.
  bool present = false;
  for (const auto& kv : kv_) present |= kv.first == "general.alignment";
  if (a != kDefaultAlignment || present) set("general.alignment", Value::u32(uint32_t(a)));
}

void Writer::add_tensor(std::string name, DType type, std::vector<int64_t> ne, const void* data) {
  if (!data) LMF_FAIL("tensor '", name, "': no data given");
  Pending p{std::move(name), type, std::move(ne), data, nullptr};
  tensor_bytes(p.name, p.type, p.ne);
  for (const auto& t : tensors_)
    if (t.name == p.name) LMF_FAIL("duplicate tensor name '", p.name, "'");
  tensors_.push_back(std::move(p));
}

void Writer::add_tensor(std::string name, DType type, std::vector<int64_t> ne, Producer produce) {
  if (!produce) LMF_FAIL("tensor '", name, "': no producer given");
  Pending p{std::move(name), type, std::move(ne), nullptr, std::move(produce)};
  tensor_bytes(p.name, p.type, p.ne);
  for (const auto& t : tensors_)
    if (t.name == p.name) LMF_FAIL("duplicate tensor name '", p.name, "'");
  tensors_.push_back(std::move(p));
}

uint64_t Writer::data_bytes() const {
  uint64_t off = 0;
  for (const auto& t : tensors_) off = align_up(off + tensor_bytes(t.name, t.type, t.ne), alignment_);
  return off;
}

void Writer::write(const std::string& path,
                   const std::function<void(uint64_t, int64_t, int64_t)>& progress) const {
  Bytes h;
  h.b.insert(h.b.end(), {'G', 'G', 'U', 'F'});
  h.put<uint32_t>(3);
  h.put<uint64_t>(tensors_.size());
  h.put<uint64_t>(kv_.size());
  for (const auto& [k, v] : kv_) {
    h.put_str(k);
    h.put(uint32_t(v.type));
    put_value(h, v, path + ": key '" + k + "'");
  }
  std::vector<size_t> sizes;
  size_t largest_produced = 0;
  uint64_t off = 0;
  for (const auto& t : tensors_) {
    size_t n = tensor_bytes(t.name, t.type, t.ne);
    sizes.push_back(n);
    if (t.produce) largest_produced = std::max(largest_produced, n);
    h.put_str(t.name);
    h.put(uint32_t(t.ne.size()));
    for (int64_t d : t.ne) h.put(d);
    h.put(uint32_t(t.type));
    h.put(off);
    off = align_up(off + n, alignment_);
  }
  h.b.resize(align_up(h.b.size(), alignment_), 0);

  TmpFile out(path + ".tmp");
  out.write(h.b.data(), h.b.size());
  // One buffer, sized for the largest produced tensor: memory stays bounded by one tensor.
  std::vector<uint8_t> buf(largest_produced);
  uint64_t done = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Pending& t = tensors_[i];
    const void* src = t.data;
    if (t.produce) {
      t.produce(buf.data());
      src = buf.data();
    }
    out.write(src, sizes[i]);
    out.zeros(align_up(sizes[i], alignment_) - sizes[i]);
    done += sizes[i];
    if (progress) progress(done, int64_t(i + 1), int64_t(tensors_.size()));
  }
  out.commit(path);
}

}  // namespace lmf::gguf
