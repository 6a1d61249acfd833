// libFuzzer target for the GGUF reader: any input must either parse or throw lmf::Error.
// Anything else (a crash, a sanitizer report, another exception type) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "format/gguf/gguf.h"
#include "util/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = lmf::gguf::File::open_memory("fuzz.gguf", data, size);
    // Touch what a loader would touch: every value accessor and every tensor byte range.
    for (const auto& [k, v] : f->metadata()) {
      if (v.is_int()) {
        try {
          (void)v.as_int();
        } catch (const lmf::Error&) {
        }
      }
      if (v.type == lmf::gguf::VType::STR) (void)v.as_str().size();
    }
    volatile uint8_t sink = 0;
    for (const auto& t : f->tensors()) {
      (void)t.nelements();
      (void)t.rows();
      sink = sink ^ t.data[0] ^ t.data[t.nbytes - 1];
    }
    (void)f->get_int_opt("general.alignment");
  } catch (const lmf::Error&) {
  }
  return 0;
}
