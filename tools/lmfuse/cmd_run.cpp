// lmfuse run: prompt in, streamed text out.
#include <chrono>
#include <cstdio>

#include "cli_common.h"
#include "runtime/generator.h"
#include "runtime/session.h"
#include "sampling/sampler.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace lmf::cli {

int cmd_run(int argc, char** argv) {
  CLI::App app{"Generate text from a prompt, streamed to stdout; speed is printed to stderr.\n\n"
               "examples:\n"
               "  lmfuse run -m models/smollm2-135m-instruct-q4_1.gguf -p \"The capital of France is\" -n 32\n"
               "  lmfuse run -m model.gguf -p \"Write a haiku about GPUs\" --chat --temp 0.7 --seed 42\n"
               "  lmfuse run -m qwen3.gguf -p \"2+2?\" --chat --no-think\n"
               "  lmfuse run -m model.gguf -f prompt.txt -n 256",
               "lmfuse run"};
  EngineFlags ef;
  add_engine_flags(app, ef);
  std::string prompt;
  int64_t n_predict = 128;
  SamplingParams sp;
  bool greedy = false, chat = false, no_think = false;
  std::string system;
  std::string prompt_file;
  auto* p_opt = app.add_option("-p,--prompt", prompt, "prompt text");
  app.add_option("-f,--file", prompt_file, "read the prompt from this file instead (- = standard input)")->excludes(p_opt);
  app.add_option("-n,--n-predict", n_predict, "tokens to generate (default 128; -1 = until end of text or context)");
  app.add_option("--temp", sp.temperature, "temperature (0 = greedy; default 0.8)");
  app.add_option("--top-k", sp.top_k, "top-k (0 = off; default 40)");
  app.add_option("--top-p", sp.top_p, "top-p (1 = off; default 0.95)");
  app.add_option("--min-p", sp.min_p, "min-p (0 = off; default 0.05)");
  app.add_option("--repeat-penalty", sp.repeat_penalty, "repetition penalty (1 = off)");
  app.add_option("--presence-penalty", sp.presence_penalty, "OpenAI presence penalty over the last --repeat-last-n tokens (0 = off)");
  app.add_option("--frequency-penalty", sp.frequency_penalty, "OpenAI frequency penalty over the same window (0 = off)");
  app.add_option("--repeat-last-n", sp.repeat_last_n, "tokens the penalty looks back over (default 64)");
  int64_t seed = 0;
  add_seed_flag(app, seed);
  app.add_flag("--greedy", greedy, "greedy decoding (same as --temp 0)");
  app.add_flag("--chat", chat, "wrap the prompt in the model's chat template (a user turn + generation prompt)");
  app.add_option("--system", system, "system message (with --chat)");
  app.add_flag("--no-think", no_think, "Qwen3: disable thinking (enable_thinking=false)");
  CLI11_PARSE(app, argc, argv);
  if (!prompt_file.empty()) prompt = read_text_file(prompt_file);
  else if (p_opt->count() == 0) LMF_FAIL("give a prompt: -p TEXT or -f FILE");
  sp.seed = resolve_seed(seed);
  if (greedy) sp.temperature = 0;
  if (n_predict < 0) n_predict = INT64_MAX;  // llama.cpp's -n -1
  require_utf8(prompt, "the prompt");
  require_utf8(system, "the system message");
  Sampler sampler(sp);  // bad settings fail before the model loads

  Loaded e = load_engine(ef);
  auto tok = Tokenizer::from_gguf(*e.model->file);
  std::string text = prompt;
  if (chat) {
    if (tok->chat_template().empty()) LMF_FAIL(ef.model, ": the model has no chat template (tokenizer.chat_template); run without --chat");
    std::vector<ChatMessage> msgs;
    if (!system.empty()) msgs.push_back({"system", system});
    msgs.push_back({"user", prompt});
    auto piece_or_empty = [&](int32_t id) { return id >= 0 ? tok->piece(id) : std::string(); };
    text = render_chat(tok->chat_template(), msgs, true, piece_or_empty(tok->bos()), piece_or_empty(tok->eos()), !no_think);
  }
  // A rendered template already holds its BOS where the model wants one.
  auto ids = tok->encode(text, tok->add_bos() && !chat, true);
  if (ids.empty()) LMF_FAIL("the prompt is empty");
  Session s(*e.model, *e.backend);
  if (int64_t(ids.size()) >= s.n_ctx())
    LMF_FAIL("prompt is ", ids.size(), " tokens long; the context holds ", s.n_ctx(), " (use a larger -c)");
  StreamDecoder dec(*tok, true);
  std::vector<int32_t> history = ids;

  using clk = std::chrono::steady_clock;
  auto t0 = clk::now();
  // The next token is picked where the logits are (on the GPU for CUDA when the backend can, see
  // Session::eval_sample), so only the token id crosses to the host, and where the backend can
  // chain steps the next one is already queued while this one is printed (runtime/generator.h).
  // The uniform number comes from the seeded sampler either way: a seed gives the same text on
  // every backend.
  Generator gen(s, sampler, history, n_predict);
  int32_t next = gen.first(ids);
  auto t1 = clk::now();
  int64_t generated = 0;
  bool context_full = false;  // stopped by -c, not by -n or an end-of-generation token
  while (n_predict > 0 && !tok->is_eog(next)) {
    std::string text = dec.push(next);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    ++generated;
    if (!gen.more()) {
      context_full = generated < n_predict;
      break;
    }
    next = gen.next();
  }
  gen.finish();
  std::string tail = dec.flush();
  std::fwrite(tail.data(), 1, tail.size(), stdout);
  std::printf("\n");
  auto t2 = clk::now();
  const double pp = std::chrono::duration<double>(t1 - t0).count();
  const double tg = std::chrono::duration<double>(t2 - t1).count();
  if (context_full)
    std::fprintf(stderr, "\n(stopped: the context of %lld tokens is full; a larger -c lets it go on)",
                 (long long)s.n_ctx());
  std::fprintf(stderr, "\nprompt: %zu tokens, %.2f t/s | generation: %lld tokens, %.2f t/s | %s\n", ids.size(),
               double(ids.size()) / pp, (long long)generated, generated > 1 ? double(generated - 1) / tg : 0.0,
               e.backend->description().c_str());
  return 0;
}

}  // namespace lmf::cli
