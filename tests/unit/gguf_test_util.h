// Helpers for the GGUF tests: temp paths, whole-file byte I/O, and a raw byte builder that
// crafts headers directly (independent of lmf::gguf::Writer) so bad files can be made exactly.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "format/gguf/gguf.h"
#include "util/status.h"

namespace gguf_test {

// Test files go to $LMFUSE_TEST_TMP when set (kept: scripts/fuzz.sh takes seeds from it),
// else to a per-process directory removed when the tests end.
inline std::filesystem::path temp_dir() {
  if (const char* d = std::getenv("LMFUSE_TEST_TMP")) return d;
  return std::filesystem::temp_directory_path() / ("lmfuse_gguf_test_" + std::to_string(::getpid()));
}

struct TempDirCleanup : ::testing::Environment {
  void TearDown() override {
    if (!std::getenv("LMFUSE_TEST_TMP")) {
      std::error_code ec;
      std::filesystem::remove_all(temp_dir(), ec);
    }
  }
};
// Registered once per binary, whichever test file includes this first.
inline const bool kTempDirCleanupRegistered = (::testing::AddGlobalTestEnvironment(new TempDirCleanup), true);

inline std::string temp_path(const std::string& name) {
  auto dir = temp_dir();
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

// Little-endian GGUF bytes, one field at a time.
struct Raw {
  std::vector<uint8_t> b;
  template <class T>
  Raw& put(T x) {
    const auto* p = reinterpret_cast<const uint8_t*>(&x);
    b.insert(b.end(), p, p + sizeof(T));
    return *this;
  }
  Raw& str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Raw& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    b.insert(b.end(), {'G', 'G', 'U', 'F'});
    return put(version).put(n_tensors).put(n_kv);
  }
  Raw& kv_u32(const std::string& k, uint32_t v) { return str(k).put<uint32_t>(4).put(v); }
  Raw& kv_str(const std::string& k, const std::string& v) { return str(k).put<uint32_t>(8).str(v); }
  Raw& tensor(const std::string& name, std::vector<int64_t> ne, uint32_t type, uint64_t offset) {
    str(name).put(uint32_t(ne.size()));
    for (int64_t d : ne) put(d);
    return put(type).put(offset);
  }
  Raw& pad(size_t a = 32) {
    b.resize((b.size() + a - 1) / a * a, 0);
    return *this;
  }
  Raw& zeros(size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }
};

// Writes `bytes` to a file, opens it and returns the error message (failing the test when the
// open succeeds or the message does not name the file).
inline std::string open_error(const std::vector<uint8_t>& bytes, const std::string& name = "bad.gguf") {
  std::string path = temp_path(name);
  write_bytes(path, bytes);
  try {
    lmf::gguf::File::open(path);
  } catch (const lmf::Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << "error does not name the file: " << msg;
    return msg;
  }
  ADD_FAILURE() << "expected lmf::Error opening " << path;
  return "";
}

}  // namespace gguf_test

namespace gguf_test {
// Whether `s` contains `sub`; on failure the whole message is printed.
inline ::testing::AssertionResult has_sub(const std::string& s, const std::string& sub) {
  if (s.find(sub) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "message: " << s << "\nexpected to contain: " << sub;
}
}  // namespace gguf_test
#define EXPECT_HAS(s, sub) EXPECT_TRUE(::gguf_test::has_sub((s), (sub)))

namespace gguf_test {
// Exact equality of two metadata values: same GGUF type, same payload, recursively.
inline ::testing::AssertionResult same_value(const lmf::gguf::Value& a, const lmf::gguf::Value& b,
                                             const std::string& where = "") {
  using lmf::gguf::VType;
  if (a.type != b.type)
    return ::testing::AssertionFailure() << where << ": type " << lmf::gguf::vtype_name(a.type) << " vs "
                                         << lmf::gguf::vtype_name(b.type);
  if (a.type == VType::ARR) {
    const auto& x = a.as_arr();
    const auto& y = b.as_arr();
    if (x.elem != y.elem || x.items.size() != y.items.size())
      return ::testing::AssertionFailure() << where << ": array elem/length differ (" << x.items.size() << " vs "
                                           << y.items.size() << ")";
    for (size_t i = 0; i < x.items.size(); ++i) {
      auto r = same_value(x.items[i], y.items[i], where + "[" + std::to_string(i) + "]");
      if (!r) return r;
    }
    return ::testing::AssertionSuccess();
  }
  if (a.type == VType::STR) {
    if (a.as_str() == b.as_str()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << where << ": '" << a.as_str() << "' vs '" << b.as_str() << "'";
  }
  if (a.type == VType::BOOL) {
    if (a.as_bool() == b.as_bool()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << where << ": bool differs";
  }
  if (a.is_int()) {
    // Compare the widened payloads exactly (uint64 values above int64 range included).
    const auto *ua = std::get_if<uint64_t>(&a.v), *ub = std::get_if<uint64_t>(&b.v);
    const auto *ia = std::get_if<int64_t>(&a.v), *ib = std::get_if<int64_t>(&b.v);
    bool eq = (ua && ub && *ua == *ub) || (ia && ib && *ia == *ib);
    if (eq) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << where << ": integer payload differs";
  }
  if (a.as_float() == b.as_float()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << where << ": " << a.as_float() << " vs " << b.as_float();
}
}  // namespace gguf_test
