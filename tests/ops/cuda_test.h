// Test harness for the CUDA op tests. With GoogleTest available (the test_cuda_ops target) this
// is gtest; the GPU machine has no gtest, so cuda_op_tests (cmake/cuda.cmake) builds the same
// sources with LMFUSE_CUDA_TESTS_STANDALONE and the minimal TEST/EXPECT/ASSERT below.
#pragma once
#ifndef LMFUSE_CUDA_TESTS_STANDALONE
#include <gtest/gtest.h>
#else
#include <iostream>
#include <sstream>
#include <vector>

namespace lmfct {
struct Case {
  const char* suite;
  const char* name;
  void (*fn)();
};
inline std::vector<Case>& registry() {
  static std::vector<Case> r;
  return r;
}
inline int& failures() {
  static int f = 0;
  return f;
}
struct Reg {
  Reg(const char* s, const char* n, void (*f)()) { registry().push_back({s, n, f}); }
};
struct Fail {
  std::ostringstream os;
  Fail(const char* file, int line, const char* what) { os << file << ":" << line << ": failed: " << what << " "; }
  ~Fail() {
    std::cerr << os.str() << "\n";
    ++failures();
  }
  template <class T>
  Fail& operator<<(const T& v) {
    os << v;
    return *this;
  }
};
struct Voidify {
  void operator&(const Fail&) {}
};
}  // namespace lmfct

#define TEST(S, N)                                                  \
  static void S##_##N##_impl();                                     \
  static ::lmfct::Reg S##_##N##_reg(#S, #N, S##_##N##_impl);        \
  static void S##_##N##_impl()
#define EXPECT_TRUE(c) \
  if (c) {             \
  } else               \
    ::lmfct::Fail(__FILE__, __LINE__, #c)
#define ASSERT_TRUE(c) \
  if (c) {             \
  } else               \
    return ::lmfct::Voidify() & ::lmfct::Fail(__FILE__, __LINE__, #c)
#define EXPECT_LE(a, b) EXPECT_TRUE((a) <= (b)) << #a " = " << (a) << ", " #b " = " << (b) << " "
#define EXPECT_GE(a, b) EXPECT_TRUE((a) >= (b)) << #a " = " << (a) << ", " #b " = " << (b) << " "
#define EXPECT_EQ(a, b) EXPECT_TRUE((a) == (b)) << #a " = " << (a) << ", " #b " = " << (b) << " "
#endif

#include <cstdlib>
#include <filesystem>
#include <string>

// The golden models' folder, ending in '/': under $LMFUSE_SOURCE_DIR when set, else under the
// source tree the binary was built from, else under the working directory (a binary packed on
// another machine by scripts/gpu_prebuild.sh, run from the repository root as the scripts/gpu_*.sh
// checks run it).
inline std::string cuda_test_golden_dir() {
  const char* env = std::getenv("LMFUSE_SOURCE_DIR");
  std::string root = env && *env ? env : LMFUSE_SOURCE_DIR;
  if (!(env && *env) && !std::filesystem::is_directory(root + "/tests/data/golden")) root = ".";
  return root + "/tests/data/golden/";
}
