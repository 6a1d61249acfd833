// lmfuse chat: interactive multi-turn chat in the terminal. The conversation is re-rendered
// with the model's chat template each turn; only the tokens after the longest prefix already in
// the KV cache are prefilled. Ctrl-C stops the current answer (not the program), Ctrl-D exits.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cli_common.h"
#include "runtime/generator.h"
#include "runtime/session.h"
#include "sampling/sampler.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "util/status.h"

namespace lmf::cli {
namespace {

std::atomic<bool> g_interrupted{false};
void on_sigint(int) { g_interrupted = true; }

// Reads one line from stdin; false on EOF (Ctrl-D). A Ctrl-C while waiting clears the line.
bool read_line(std::string& out) {
  out.clear();
  for (;;) {
    char buf[4096];
    errno = 0;
    if (std::fgets(buf, sizeof buf, stdin)) {
      out += buf;
      if (!out.empty() && out.back() == '\n') {
        out.pop_back();
        return true;
      }
      continue;
    }
    if (errno == EINTR || g_interrupted) {  // Ctrl-C at the prompt: start a fresh line
      clearerr(stdin);
      g_interrupted = false;
      out.clear();
      std::printf("\n> ");
      std::fflush(stdout);
      continue;
    }
    return !out.empty();
  }
}

}  // namespace

int cmd_chat(int argc, char** argv) {
  CLI::App app{"Interactive multi-turn chat with the model's chat template.\n"
               "Commands: /clear (new conversation), /exit; Ctrl-C stops an answer, Ctrl-D exits.\n\n"
               "examples:\n"
               "  lmfuse chat -m models/smollm2-135m-instruct-q4_1.gguf\n"
               "  lmfuse chat -m qwen3.gguf --system \"You are terse.\" --no-think --temp 0.6",
               "lmfuse chat"};
  EngineFlags ef;
  add_engine_flags(app, ef);
  std::string system;
  SamplingParams sp;
  sp.temperature = 0.7f;
  int64_t n_predict = 1024;
  bool no_think = false;
  app.add_option("--system", system, "system message");
  app.add_option("-n,--n-predict", n_predict, "most tokens per answer (default 1024; -1 = until end of text or context)");
  app.add_option("--temp", sp.temperature, "temperature (0 = greedy; default 0.7)");
  app.add_option("--top-k", sp.top_k, "top-k (default 40)");
  app.add_option("--top-p", sp.top_p, "top-p (default 0.95)");
  app.add_option("--min-p", sp.min_p, "min-p (default 0.05)");
  app.add_option("--repeat-penalty", sp.repeat_penalty, "repetition penalty (1 = off)");
  app.add_option("--presence-penalty", sp.presence_penalty, "OpenAI presence penalty over the last --repeat-last-n tokens (0 = off)");
  app.add_option("--frequency-penalty", sp.frequency_penalty, "OpenAI frequency penalty over the same window (0 = off)");
  app.add_option("--repeat-last-n", sp.repeat_last_n, "window of the penalties, in tokens (default 64; -1: all)");
  int64_t seed = 0;
  add_seed_flag(app, seed);
  app.add_flag("--no-think", no_think, "Qwen3: disable thinking");
  CLI11_PARSE(app, argc, argv);
  sp.seed = resolve_seed(seed);
  if (n_predict < 0) n_predict = INT64_MAX;  // llama.cpp's -n -1, as in run (it gave empty answers)
  require_utf8(system, "the system message");
  Sampler sampler(sp);  // bad settings fail before the model loads

  Loaded e = load_engine(ef);
  auto tok = Tokenizer::from_gguf(*e.model->file);
  if (tok->chat_template().empty())
    LMF_FAIL(ef.model, ": the model has no chat template (tokenizer.chat_template); use `lmfuse run`");
  Session s(*e.model, *e.backend);
  auto text_of = [&](int32_t id) { return id >= 0 ? tok->piece(id) : std::string(); };
  const std::string bos = text_of(tok->bos()), eos = text_of(tok->eos());

  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocked read returns EINTR
  sigaction(SIGINT, &sa, nullptr);

  std::vector<ChatMessage> msgs;
  std::vector<int32_t> cached;  // tokens whose K/V are in the cache, in order
  auto reset = [&] {
    msgs.clear();
    if (!system.empty()) msgs.push_back({"system", system});
    cached.clear();
    s.reset();
  };
  reset();
  std::fprintf(stderr, "lmfuse chat: %s on %s. /clear, /exit, Ctrl-C stops an answer, Ctrl-D exits.\n",
               ef.model.c_str(), e.backend->description().c_str());
  std::string line;
  for (;;) {
    std::printf("> ");
    std::fflush(stdout);
    if (!read_line(line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/clear") {
      reset();
      std::printf("(conversation cleared)\n");
      continue;
    }
    if (line.empty()) continue;
    if (auto bad = utf8::invalid_message(line, "that line"); !bad.empty()) {  // the conversation goes on
      std::printf("(%s: type it again)\n", bad.c_str());
      continue;
    }
    msgs.push_back({"user", line});
    std::string prompt = render_chat(tok->chat_template(), msgs, true, bos, eos, !no_think);
    std::vector<int32_t> ids = tok->encode(prompt, false, true);
    // Reuse the longest prefix already in the cache; prefill only the rest.
    size_t p = 0;
    while (p < cached.size() && p < ids.size() && cached[p] == ids[p]) ++p;
    if (p == ids.size()) --p;  // at least one token must run to get logits
    if (int64_t(ids.size()) + 1 >= s.n_ctx()) {
      std::printf("(the conversation is %zu tokens; the context holds %lld: /clear to start over)\n", ids.size(),
                  (long long)s.n_ctx());
      msgs.pop_back();
      continue;
    }
    s.rewind(int64_t(p));
    cached.resize(p);
    // The next token is picked where the logits are (Session::eval_next: on the GPU for CUDA), so
    // only its id crosses to the host, and where the backend can chain steps the next one is
    // queued while this one is printed (runtime/generator.h); cached holds what the KV cache
    // holds, and is the history the repetition penalty looks at.
    cached = ids;
    Generator gen(s, sampler, cached, n_predict);
    int32_t next = gen.first(std::span(ids).subspan(p));
    StreamDecoder dec(*tok, true);
    std::string answer;
    g_interrupted = false;
    bool full = false;  // the answer was cut by the context, not by -n or its end
    for (int64_t i = 0; i < n_predict && !g_interrupted; ++i) {
      if (tok->is_eog(next)) break;
      std::string piece = dec.push(next);
      answer += piece;
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      // (one position kept free for the next turn, as before)
      if (!gen.more() || gen.pos() + 1 >= s.n_ctx() || g_interrupted) {
        full = i + 1 < n_predict;  // short of -n: the context stopped it (an interrupt prints as such)
        break;
      }
      next = gen.next();
    }
    gen.finish();
    std::string tail = dec.flush();
    answer += tail;
    std::printf("%s%s\n", tail.c_str(),
                g_interrupted ? " [stopped]" : full ? " [the context is full: /clear to start over, or a larger -c]" : "");
    g_interrupted = false;
    msgs.push_back({"assistant", answer});
  }
  std::printf("\n");
  return 0;
}

}  // namespace lmf::cli
