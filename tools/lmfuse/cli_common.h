// Shared CLI plumbing: the common flags (-m, -t, -c, --device, --knob) and model/backend setup.
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"
#include "runtime/load.h"
#include "util/knobs.h"

namespace lmf::cli {

struct EngineFlags {
  std::string model;
  int threads = 0;
  int64_t n_ctx = 0;  // 0: min(model's training context, 4096)
  std::string device = "auto";
  std::vector<std::string> knobs;  // NAME=0|1|auto
  int ngl = -1;                    // llama.cpp compatibility: 0 = CPU, >0 = GPU
  int main_gpu = -1;               // CUDA device index (-mg); -1 = not given (device 0)
};

void add_engine_flags(CLI::App& app, EngineFlags& f, bool model_required = true);
Knobs knobs_from(const EngineFlags& f);  // environment, then --knob overrides

Loaded load_engine(const EngineFlags& f, int64_t min_ctx = 0);

// Text typed by the user (a prompt, a system message, the text to tokenize) must be UTF-8: the
// tokenizer would otherwise replace ill-formed bytes with U+FFFD (as Hugging Face's decode does)
// and the model would answer a prompt nobody wrote. Throws utf8::invalid_message.
void require_utf8(const std::string& text, const char* what);

// --seed for sampling: N >= 0 seeds it; -1 (llama.cpp's convention) draws a seed from
// std::random_device and prints it to stderr, so the run can be repeated.
void add_seed_flag(CLI::App& app, int64_t& seed);
uint64_t resolve_seed(int64_t seed);

// The whole of a text file ("-" = standard input), or a one-line error naming it.
std::string read_text_file(const std::string& path);

// The option checks for integers, used for every bounded flag: "must be >= MIN, got V" and "must
// be MIN to MAX, got V" (CLI11's Range says it in a longer sentence, naming its own types).
CLI::Validator at_least(int64_t min);
CLI::Validator in_range(int64_t min, int64_t max);

// -t/--threads: 0 (the default) = every core, at most ThreadPool::kMaxThreads.
void add_threads_flag(CLI::App& app, int& threads);

// Parses "1,2,3", "1 2 3" or "[1, 2, 3]" into token ids; a clear error naming `what` (the flag)
// on anything else.
std::vector<int32_t> parse_token_list(const std::string& s, const char* what);

// Each subcommand: returns the process exit code; errors are thrown as lmf::Error.
int cmd_run(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_logits(int argc, char** argv);
int cmd_inspect(int argc, char** argv);
int cmd_random_model(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_detokenize(int argc, char** argv);
int cmd_convert(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_chat(int argc, char** argv);
int cmd_serve(int argc, char** argv);

}  // namespace lmf::cli
