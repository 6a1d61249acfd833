// Safetensors header parsing and validation. The header is untrusted input: every field is
// type-checked and every byte range checked against the file before a Tensor points into it.
#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "format/quant/half.h"
#include "format/safetensors/safetensors.h"
#include "util/status.h"

namespace lmf::safetensors {

namespace {

// Real headers are a few MB at most (one entry per tensor); the limit keeps a corrupted size
// field from being trusted as an allocation size.
constexpr uint64_t kMaxHeader = uint64_t(100) << 20;

SType parse_stype(const std::string& file, const std::string& tensor, const std::string& s) {
  if (s == "F32") return SType::F32;
  if (s == "F16") return SType::F16;
  if (s == "BF16") return SType::BF16;
  LMF_FAIL(file, ": tensor '", tensor, "': dtype '", s, "' is not supported (expected F32, F16 or BF16)");
}

}  // namespace

const char* stype_name(SType t) {
  switch (t) {
    case SType::F32: return "F32";
    case SType::F16: return "F16";
    case SType::BF16: return "BF16";
  }
  return "?";
}

size_t stype_size(SType t) { return t == SType::F32 ? 4 : 2; }

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void to_f32(const Tensor& t, int64_t begin, int64_t n, float* dst) {
  LMF_CHECK(begin >= 0 && n >= 0 && begin + n <= t.numel());
  switch (t.dtype) {
    case SType::F32:
      std::memcpy(dst, t.data + size_t(begin) * 4, size_t(n) * 4);
      return;
    case SType::F16:
    case SType::BF16: {
      const uint8_t* p = t.data + size_t(begin) * 2;
      const bool f16 = t.dtype == SType::F16;
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);  // the data section is not aligned for uint16
        dst[i] = f16 ? fp16_to_f32(h) : bf16_to_f32(h);
      }
      return;
    }
  }
}

std::unique_ptr<File> File::open(const std::string& path) {
  std::unique_ptr<File> f(new File());
  f->map_ = MappedFile(path);
  f->name_ = path;
  f->parse(f->map_.data(), f->map_.size());
  return f;
}

std::unique_ptr<File> File::open_memory(const std::string& name, const uint8_t* data, size_t size) {
  std::unique_ptr<File> f(new File());
  f->name_ = name;
  f->parse(data, size);
  return f;
}

const Tensor* File::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void File::parse(const uint8_t* data, size_t size) {
  const std::string& p = name_;
  if (size < 8) LMF_FAIL(p, ": file is ", size, " bytes, too short for a safetensors header (8-byte size + JSON)");
  uint64_t hsize;
  std::memcpy(&hsize, data, 8);
  if (hsize < 2 || hsize > kMaxHeader)
    LMF_FAIL(p, ": header size field is ", hsize, ", expected 2..", kMaxHeader, " (corrupted or not a safetensors file)");
  if (hsize > size - 8)
    LMF_FAIL(p, ": header size field is ", hsize, " but only ", size - 8, " bytes follow (truncated file?)");
  const uint8_t* body = data + 8 + hsize;
  const uint64_t body_size = size - 8 - hsize;

  nlohmann::json j;
  try {
    j = nlohmann::json::parse(data + 8, data + 8 + hsize);
  } catch (const nlohmann::json::exception& e) {
    LMF_FAIL(p, ": header is not valid JSON: ", e.what());
  }
  if (!j.is_object()) LMF_FAIL(p, ": header must be a JSON object, got ", j.type_name());

  struct Range {
    uint64_t b, e;
    size_t idx;
  };
  std::vector<Range> ranges;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) LMF_FAIL(p, ": __metadata__ must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) LMF_FAIL(p, ": __metadata__['", m.key(), "'] must be a string");
        meta_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) { LMF_FAIL(p, ": tensor '", name, "': ", what); };
    if (!v.is_object()) bad("header entry must be an object");
    if (!v.contains("dtype") || !v["dtype"].is_string()) bad("missing or non-string 'dtype'");
    if (!v.contains("shape") || !v["shape"].is_array()) bad("missing or non-array 'shape'");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      bad("'data_offsets' must be an array [begin, end]");
    Tensor t;
    t.name = name;
    t.file = p;
    t.dtype = parse_stype(p, name, v["dtype"].get<std::string>());
    uint64_t n = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) bad("shape entries must be non-negative integers, got " + d.dump());
      const uint64_t x = d.get<uint64_t>();
      if (x > (uint64_t(1) << 40) || __builtin_mul_overflow(n, x, &n) || n > (uint64_t(1) << 50))
        bad("shape " + v["shape"].dump() + " is too large");
      t.shape.push_back(int64_t(x));
    }
    const auto& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      bad("data_offsets must be non-negative integers, got " + off.dump());
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (e < b) bad("data_offsets " + off.dump() + " end before they begin");
    if (e > body_size)
      bad(cat("data_offsets ", off.dump(), " reach past the end of the data section (", body_size,
              " bytes; truncated file?)"));
    const uint64_t want = n * stype_size(t.dtype);
    if (e - b != want)
      bad(cat("data_offsets ", off.dump(), " hold ", e - b, " bytes, but ", stype_name(t.dtype), " ",
              v["shape"].dump(), " needs ", want));
    t.data = body + b;
    t.nbytes = size_t(e - b);
    if (index_.count(name)) bad("appears twice in the header");
    index_[name] = tensors_.size();
    ranges.push_back({b, e, tensors_.size()});
    tensors_.push_back(std::move(t));
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.b < b.b; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].b < ranges[i - 1].e && ranges[i].e > ranges[i].b)
      LMF_FAIL(p, ": tensors '", tensors_[ranges[i - 1].idx].name, "' and '", tensors_[ranges[i].idx].name,
               "' overlap in the data section (corrupted header)");
  }
}

}  // namespace lmf::safetensors
