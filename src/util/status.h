// Errors: lmfuse reports failures by throwing lmf::Error with a one-line, user-facing message.
// LMF_FAIL is for user-facing errors (bad input: say what was expected and what was found);
// LMF_CHECK is for internal invariants and also reports the statement, file and line.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace lmf {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class... A>
std::string cat(const A&... a) {
  std::ostringstream s;
  (s << ... << a);
  return s.str();
}

}  // namespace lmf

#define LMF_FAIL(...) throw ::lmf::Error(::lmf::cat(__VA_ARGS__))
#define LMF_CHECK(cond, ...)                                                                  \
  do {                                                                                        \
    if (!(cond))                                                                              \
      throw ::lmf::Error(::lmf::cat("internal check failed: ", #cond, " (", __FILE__, ":",   \
                                    __LINE__, ") " __VA_OPT__(, ) __VA_ARGS__));              \
  } while (0)
