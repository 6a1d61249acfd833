#include "model/presets.h"

#include "util/status.h"

namespace lmf {

// From each model's config.json on the Hugging Face hub.
const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = {
      {"qwen3-0.6b", "qwen3", 151936, 1024, 28, 16, 8, 128, 3072, 40960, true, 1e6, 1e-6},
      {"qwen3-1.7b", "qwen3", 151936, 2048, 28, 16, 8, 128, 6144, 40960, true, 1e6, 1e-6},
      {"qwen3-4b", "qwen3", 151936, 2560, 36, 32, 8, 128, 9728, 40960, true, 1e6, 1e-6},
      {"qwen3-8b", "qwen3", 151936, 4096, 36, 32, 8, 128, 12288, 40960, false, 1e6, 1e-6},
      {"qwen3-14b", "qwen3", 151936, 5120, 40, 40, 8, 128, 17408, 40960, false, 1e6, 1e-6},
      {"qwen3-32b", "qwen3", 151936, 5120, 64, 64, 8, 128, 25600, 40960, false, 1e6, 1e-6},
      {"llama3-8b", "llama", 128256, 4096, 32, 32, 8, 128, 14336, 8192, false, 5e5, 1e-5},
      {"llama3.1-8b", "llama", 128256, 4096, 32, 32, 8, 128, 14336, 131072, false, 5e5, 1e-5, 8.0},
      {"llama3.2-1b", "llama", 128256, 2048, 16, 32, 8, 64, 8192, 131072, true, 5e5, 1e-5, 32.0},
      {"llama3.2-3b", "llama", 128256, 3072, 28, 24, 8, 128, 8192, 131072, true, 5e5, 1e-5, 32.0},
      {"smollm2-135m", "llama", 49152, 576, 30, 9, 3, 64, 1536, 8192, true, 1e5, 1e-5},
  };
  return p;
}

const Preset& find_preset(const std::string& name) {
  std::string all;
  for (const auto& p : presets()) {
    if (name == p.name) return p;
    all += cat(all.empty() ? "" : ", ", p.name);
  }
  LMF_FAIL("unknown preset '", name, "' (known: ", all, ")");
}

}  // namespace lmf
