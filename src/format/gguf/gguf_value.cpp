// Metadata values: type names, constructors for common arrays, and checked accessors.
#include <limits>

#include "format/gguf/gguf.h"
#include "util/status.h"

namespace lmf::gguf {

const char* vtype_name(VType t) {
  switch (t) {
    case VType::U8: return "uint8";
    case VType::I8: return "int8";
    case VType::U16: return "uint16";
    case VType::I16: return "int16";
    case VType::U32: return "uint32";
    case VType::I32: return "int32";
    case VType::F32: return "float32";
    case VType::BOOL: return "bool";
    case VType::STR: return "string";
    case VType::ARR: return "array";
    case VType::U64: return "uint64";
    case VType::I64: return "int64";
    case VType::F64: return "float64";
  }
  return "unknown";
}

Value Value::strs(const std::vector<std::string>& s) {
  std::vector<Value> items;
  items.reserve(s.size());
  for (const auto& x : s) items.push_back(str(x));
  return arr(VType::STR, std::move(items));
}

Value Value::i32s(const std::vector<int32_t>& s) {
  std::vector<Value> items;
  items.reserve(s.size());
  for (int32_t x : s) items.push_back(i32(x));
  return arr(VType::I32, std::move(items));
}

Value Value::f32s(const std::vector<float>& s) {
  std::vector<Value> items;
  items.reserve(s.size());
  for (float x : s) items.push_back(f32(x));
  return arr(VType::F32, std::move(items));
}

bool Value::is_int() const {
  switch (type) {
    case VType::U8: case VType::I8: case VType::U16: case VType::I16:
    case VType::U32: case VType::I32: case VType::U64: case VType::I64:
      return true;
    default:
      return false;
  }
}

int64_t Value::as_int() const {
  if (!is_int()) LMF_FAIL("expected an integer, got ", vtype_name(type));
  if (const auto* u = std::get_if<uint64_t>(&v)) {
    if (*u > uint64_t(std::numeric_limits<int64_t>::max()))
      LMF_FAIL("expected an integer that fits int64, got ", *u);
    return int64_t(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  LMF_FAIL("expected an integer, got a ", vtype_name(type), " tag holding another kind of value");
}

double Value::as_float() const {
  if (type == VType::F32 || type == VType::F64) {
    if (const auto* d = std::get_if<double>(&v)) return *d;
  } else if (is_int()) {
    if (const auto* u = std::get_if<uint64_t>(&v)) return double(*u);
    if (const auto* i = std::get_if<int64_t>(&v)) return double(*i);
  }
  LMF_FAIL("expected a number, got ", vtype_name(type));
}

bool Value::as_bool() const {
  if (type == VType::BOOL)
    if (const auto* b = std::get_if<bool>(&v)) return *b;
  LMF_FAIL("expected a bool, got ", vtype_name(type));
}

const std::string& Value::as_str() const {
  if (type == VType::STR)
    if (const auto* s = std::get_if<std::string>(&v)) return *s;
  LMF_FAIL("expected a string, got ", vtype_name(type));
}

const Array& Value::as_arr() const {
  if (type == VType::ARR)
    if (const auto* a = std::get_if<Array>(&v)) return *a;
  LMF_FAIL("expected an array, got ", vtype_name(type));
}

int64_t TensorInfo::nelements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;  // the reader and writer reject shapes whose product overflows
  return n;
}

}  // namespace lmf::gguf
