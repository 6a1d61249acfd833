// libFuzzer target for text in: any bytes (a prompt is user input, and need not be UTF-8 when it
// comes through the library) must encode to ids inside the vocabulary, and those ids must decode,
// with the real tokenizer of $LMFUSE_FUZZ_TOKENIZER (a GGUF, or a tokenizer.json or its folder).
// Valid UTF-8 without control characters round-trips for a byte-level BPE without a normalizer
// (SmolLM2, the demo model), so that is checked too: its vocabulary lacks a few byte tokens
// (0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xF1-0xF4: the lead bytes of U+40000 and above, and bytes
// that UTF-8 never uses), which are dropped as HF drops them.
// A crash, a sanitizer report or any exception is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "format/gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {
std::unique_ptr<lmf::Tokenizer> tok;
bool round_trips = false;

bool plain(const std::string& text) {  // valid UTF-8 below U+40000, no controls but \t \n \r
  for (unsigned char c : text)
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F || c >= 0xF1) return false;
  return lmf::utf8::first_invalid(text) == std::string::npos;
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* path = std::getenv("LMFUSE_FUZZ_TOKENIZER");
  if (!path) {
    std::fprintf(stderr, "fuzz_tokenizer: set LMFUSE_FUZZ_TOKENIZER to a GGUF or a tokenizer.json\n");
    std::abort();
  }
  const std::string p(path);
  if (p.size() > 5 && p.compare(p.size() - 5, 5, ".gguf") == 0) {
    tok = lmf::Tokenizer::from_gguf(*lmf::gguf::File::open(p));
    round_trips = true;  // the demo GGUF's tokenizer has no normalizer
  } else {
    tok = lmf::Tokenizer::from_hf_path(p);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (bool special : {false, true}) {
    const auto ids = tok->encode(text, size % 2 == 0, special);
    for (int32_t id : ids)
      if (id < 0 || id >= tok->n_vocab()) std::abort();
    const std::string back = tok->decode(ids, !special);
    if (round_trips && !special && size % 2 == 1 && plain(text) && back != text) std::abort();
  }
  return 0;
}
