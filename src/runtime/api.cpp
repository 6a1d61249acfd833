// The public API (include/lmfuse/lmfuse.h) over the internal layers: Model + backend + Session
// + tokenizer + sampler. Internal errors (lmf::Error) surface as lmfuse::Error.
#include "lmfuse/lmfuse.h"

#include <algorithm>

#include "backend/backend.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/generator.h"
#include "runtime/load.h"
#include "runtime/session.h"
#include "sampling/sampler.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "util/status.h"
#include "util/threadpool.h"

namespace lmfuse {

// What a Model and an Engine hold: the weights on a backend, the tokenizer, and (paged-KV
// backends) the runtime engine whose cache holds every sequence.
struct Core {
  std::unique_ptr<lmf::Model> model;
  std::unique_ptr<lmf::Backend> backend;
  std::unique_ptr<lmf::Tokenizer> tok;  // null when the GGUF has none
  std::unique_ptr<lmf::Engine> engine;  // paged backends
  int own_cache_sessions = 0;           // sessions on a backend with its own cache (at most 1)

  const lmf::Tokenizer& tokenizer() const {
    if (!tok) throw Error(model->file->path() + ": no tokenizer in this GGUF");
    return *tok;
  }
};

// A conversation: its session (KV position) and the tokens its cache holds.
struct Conv {
  std::unique_ptr<lmf::Session> session;
  std::vector<int32_t> history;
};

struct Model::Impl {
  std::shared_ptr<Core> core;
  Conv conv;
};
struct Engine::Impl : Core {};
struct Sequence::Impl {
  std::shared_ptr<Engine::Impl> core;
  Conv conv;
  ~Impl() {
    if (!core->engine) --core->own_cache_sessions;
    conv.session.reset();  // frees its KV blocks before the engine can go
  }
};

template <class F>
static auto guard(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const lmf::Error& e) {
    throw Error(e.what());
  }
}

namespace {

void open_core(Core& c, const std::string& path, const EngineOptions& o) {
  lmf::LoadRequest r;
  r.path = path;
  r.device = o.device;
  r.threads = o.threads;
  r.n_ctx = o.context;
  r.knobs = lmf::Knobs::from_env();
  auto l = lmf::load(r);
  c.model = std::move(l.model);
  c.backend = std::move(l.backend);
  if (c.model->file->find("tokenizer.ggml.model")) c.tok = lmf::Tokenizer::from_gguf(*c.model->file);
}

std::string chat_template(const Core& c, const std::vector<ChatMessage>& msgs, bool add_gen, bool thinking) {
  const auto& t = c.tokenizer();
  if (t.chat_template().empty()) throw lmf::Error("the model has no chat template");
  std::vector<lmf::ChatMessage> m;
  for (const auto& x : msgs) m.push_back({x.role, x.content});
  auto text = [&](int32_t id) { return id >= 0 ? t.piece(id) : std::string(); };
  return lmf::render_chat(t.chat_template(), m, add_gen, text(t.bos()), text(t.eos()), thinking);
}

std::vector<float> eval_on(Conv& c, std::span<const int32_t> tokens, bool all_logits) {
  auto l = c.session->eval(tokens, all_logits);
  c.history.insert(c.history.end(), tokens.begin(), tokens.end());
  return l;
}

std::string generate_on(const Core& core, Conv& c, const std::string& prompt, int64_t max_tokens,
                        const SamplingOptions& so, const std::function<bool(std::string_view)>& on_text) {
  if (auto bad = lmf::utf8::invalid_message(prompt, "the prompt"); !bad.empty()) throw lmf::Error(bad);
  const auto& t = core.tokenizer();
  auto ids = t.encode(prompt, c.history.empty() && t.add_bos() && prompt.rfind(t.piece(std::max(t.bos(), 0)), 0) != 0, true);
  if (ids.empty()) throw lmf::Error("the prompt is empty");
  lmf::SamplingParams sp;
  sp.temperature = so.temperature;
  sp.top_k = so.top_k;
  sp.top_p = so.top_p;
  sp.min_p = so.min_p;
  sp.repeat_penalty = so.repeat_penalty;
  sp.seed = so.seed;
  lmf::Sampler sampler(sp);
  lmf::StreamDecoder dec(t, true);
  // Runs the prompt and picks each next token where the logits are (Session::eval_next: on the
  // GPU for CUDA), with the next step queued while a token is handed out where the backend can
  // chain steps (runtime/generator.h). The history holds what the cache holds, so it (and the
  // position) is rolled back when the prompt fails.
  lmf::Session& s = *c.session;
  const size_t h0 = c.history.size();
  const int64_t p0 = s.pos();
  c.history.insert(c.history.end(), ids.begin(), ids.end());
  lmf::Generator gen(s, sampler, c.history, max_tokens);
  int32_t next = 0;
  try {
    next = gen.first(std::span(c.history).subspan(h0));
  } catch (...) {
    c.history.resize(h0);
    s.rewind(p0);
    throw;
  }
  std::string out;
  for (int64_t i = 0; i < max_tokens; ++i) {
    if (t.is_eog(next)) break;
    const std::string piece = dec.push(next);
    out += piece;
    if (on_text && !piece.empty() && !on_text(piece)) break;
    if (!gen.more()) break;
    next = gen.next();
  }
  gen.finish();
  const std::string tail = dec.flush();
  out += tail;
  if (on_text && !tail.empty()) on_text(tail);
  return out;
}

}  // namespace

Model::Model() : impl_(std::make_unique<Impl>()) {}
Model::~Model() = default;

std::unique_ptr<Model> Model::open(const std::string& path, const EngineOptions& o) {
  return guard([&] {
    std::unique_ptr<Model> m(new Model());
    auto& I = *m->impl_;
    I.core = std::make_shared<Core>();
    open_core(*I.core, path, o);
    I.conv.session = std::make_unique<lmf::Session>(*I.core->model, *I.core->backend);
    return m;
  });
}

std::vector<int32_t> Model::tokenize(std::string_view text, bool add_bos) const {
  return guard([&] { return impl_->core->tokenizer().encode(text, add_bos, true); });
}

std::string Model::detokenize(std::span<const int32_t> ids) const {
  return guard([&] { return impl_->core->tokenizer().decode(ids); });
}

std::string Model::apply_chat_template(const std::vector<ChatMessage>& msgs, bool add_gen, bool thinking) const {
  return guard([&] { return chat_template(*impl_->core, msgs, add_gen, thinking); });
}

std::vector<float> Model::eval(std::span<const int32_t> tokens, bool all_logits) {
  return guard([&] { return eval_on(impl_->conv, tokens, all_logits); });
}

std::string Model::generate(const std::string& prompt, int64_t max_tokens, const SamplingOptions& so,
                            const std::function<bool(std::string_view)>& on_text) {
  return guard([&] { return generate_on(*impl_->core, impl_->conv, prompt, max_tokens, so, on_text); });
}

void Model::reset() {
  impl_->conv.session->reset();
  impl_->conv.history.clear();
}

int64_t Model::n_vocab() const { return impl_->core->model->hp.n_vocab; }
int64_t Model::position() const { return impl_->conv.session->pos(); }
int64_t Model::context() const { return impl_->conv.session->n_ctx(); }
std::string Model::backend() const { return impl_->core->backend->description(); }

// Engine / Sequence.
Engine::Engine() : impl_(std::make_shared<Impl>()) {}
Engine::~Engine() = default;

std::shared_ptr<Engine> Engine::open(const std::string& path, const EngineOptions& o) {
  return guard([&] {
    std::shared_ptr<Engine> e(new Engine());
    Impl& I = *e->impl_;
    open_core(I, path, o);
    if (I.backend->paged_kv()) {
      lmf::EngineConfig c;
      c.n_ctx = I.backend->options().n_ctx;
      c.kv_positions = lmf::kv_positions_for_budget(*I.model, *I.backend, o.kv_budget, c.n_ctx);
      I.engine = std::make_unique<lmf::Engine>(*I.model, *I.backend, c);
    }
    return e;
  });
}

std::unique_ptr<Sequence> Engine::new_sequence() {
  return guard([&] {
    std::unique_ptr<Sequence> s(new Sequence());
    if (impl_->engine) {
      s->impl_->conv.session = std::make_unique<lmf::Session>(*impl_->engine);
    } else {
      if (impl_->own_cache_sessions > 0)
        throw lmf::Error(impl_->backend->name() + " keeps one sequence's KV cache: free the other sequence first");
      s->impl_->conv.session = std::make_unique<lmf::Session>(*impl_->model, *impl_->backend);
      ++impl_->own_cache_sessions;
    }
    s->impl_->core = impl_;
    return s;
  });
}

std::vector<int32_t> Engine::tokenize(std::string_view text, bool add_bos) const {
  return guard([&] { return impl_->tokenizer().encode(text, add_bos, true); });
}
std::string Engine::detokenize(std::span<const int32_t> ids) const {
  return guard([&] { return impl_->tokenizer().decode(ids); });
}
std::string Engine::apply_chat_template(const std::vector<ChatMessage>& msgs, bool add_gen, bool thinking) const {
  return guard([&] { return chat_template(*impl_, msgs, add_gen, thinking); });
}
int64_t Engine::n_vocab() const { return impl_->model->hp.n_vocab; }
int64_t Engine::context() const { return impl_->backend->options().n_ctx; }
int64_t Engine::kv_capacity() const { return impl_->engine ? impl_->engine->kv().capacity() : context(); }
int64_t Engine::kv_free() const {
  return impl_->engine ? impl_->engine->kv().free_blocks() * impl_->engine->kv().block_size() : 0;
}
std::string Engine::backend() const { return impl_->backend->description(); }

Sequence::Sequence() : impl_(std::make_unique<Impl>()) {}
Sequence::~Sequence() = default;

std::vector<float> Sequence::eval(std::span<const int32_t> tokens, bool all_logits) {
  return guard([&] { return eval_on(impl_->conv, tokens, all_logits); });
}
std::string Sequence::generate(const std::string& prompt, int64_t max_tokens, const SamplingOptions& so,
                               const std::function<bool(std::string_view)>& on_text) {
  return guard([&] { return generate_on(*impl_->core, impl_->conv, prompt, max_tokens, so, on_text); });
}
void Sequence::reset() {
  impl_->conv.session->reset();
  impl_->conv.history.clear();
}
std::unique_ptr<Sequence> Sequence::fork() const {
  return guard([&] {
    std::unique_ptr<Sequence> s(new Sequence());
    s->impl_->conv.session = impl_->conv.session->fork();
    s->impl_->conv.history = impl_->conv.history;
    s->impl_->core = impl_->core;
    return s;
  });
}
int64_t Sequence::position() const { return impl_->conv.session->pos(); }

}  // namespace lmfuse
