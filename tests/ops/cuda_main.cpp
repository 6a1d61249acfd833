// main() of the standalone op-test binary (cuda_op_tests); empty in the gtest build.
#include "cuda_test.h"
#ifdef LMFUSE_CUDA_TESTS_STANDALONE
#include <chrono>
#include <cstring>
#include <exception>

int main(int argc, char** argv) {
  int run = 0, failed = 0;
  for (const auto& c : lmfct::registry()) {
    std::string full = std::string(c.suite) + "." + c.name;
    if (argc > 1 && full.find(argv[1]) == std::string::npos) continue;
    ++run;
    const int before = lmfct::failures();
    std::cout << "[ RUN      ] " << full << std::endl;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      c.fn();
    } catch (const std::exception& e) {
      std::cerr << "exception: " << e.what() << "\n";
      ++lmfct::failures();
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const bool ok = lmfct::failures() == before;
    failed += !ok;
    std::cout << (ok ? "[       OK ] " : "[  FAILED  ] ") << full << " (" << int(ms) << " ms)" << std::endl;
  }
  std::cout << "[==========] " << run << " tests, " << (run - failed) << " passed, " << failed << " failed" << std::endl;
  return failed ? 1 : 0;
}
#endif
