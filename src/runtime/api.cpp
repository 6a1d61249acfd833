// The public API (include/lmfuse/lmfuse.h) over the internal layers: Model + backend + Session
// + tokenizer + sampler. Internal errors (lmf::Error) surface as lmfuse::Error.
#include "lmfuse/lmfuse.h"

#include <algorithm>

#include "backend/backend.h"
#include "model/model.h"
#include "runtime/generator.h"
#include "runtime/session.h"
#include "sampling/sampler.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "util/status.h"
#include "util/threadpool.h"

namespace lmfuse {

struct Model::Impl {
  std::unique_ptr<lmf::Model> model;
  std::unique_ptr<lmf::Backend> backend;
  std::unique_ptr<lmf::Session> session;
  std::unique_ptr<lmf::Tokenizer> tok;  // null when the GGUF has none
  std::vector<int32_t> history;

  const lmf::Tokenizer& tokenizer() const {
    if (!tok) throw Error(model->file->path() + ": no tokenizer in this GGUF");
    return *tok;
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

Model::Model() : impl_(std::make_unique<Impl>()) {}
Model::~Model() = default;

std::unique_ptr<Model> Model::open(const std::string& path, const EngineOptions& o) {
  return guard([&] {
    std::unique_ptr<Model> m(new Model());
    auto& I = *m->impl_;
    I.model = lmf::Model::load(path);
    lmf::BackendOptions bo;
    bo.n_threads = o.threads > 0 ? o.threads : lmf::ThreadPool::default_threads();
    bo.n_ctx = o.context > 0 ? o.context : std::min<int64_t>(I.model->hp.n_ctx_train, 4096);
    bo.knobs = lmf::Knobs::from_env();
    I.backend = lmf::make_backend(o.device, bo);
    I.backend->load(*I.model);
    I.session = std::make_unique<lmf::Session>(*I.model, *I.backend);
    if (I.model->file->find("tokenizer.ggml.model")) I.tok = lmf::Tokenizer::from_gguf(*I.model->file);
    return m;
  });
}

std::vector<int32_t> Model::tokenize(std::string_view text, bool add_bos) const {
  return guard([&] { return impl_->tokenizer().encode(text, add_bos, true); });
}

std::string Model::detokenize(std::span<const int32_t> ids) const {
  return guard([&] { return impl_->tokenizer().decode(ids); });
}

std::string Model::apply_chat_template(const std::vector<ChatMessage>& msgs, bool add_gen, bool thinking) const {
  return guard([&] {
    const auto& t = impl_->tokenizer();
    if (t.chat_template().empty()) throw lmf::Error("the model has no chat template");
    std::vector<lmf::ChatMessage> m;
    for (const auto& x : msgs) m.push_back({x.role, x.content});
    auto text = [&](int32_t id) { return id >= 0 ? t.piece(id) : std::string(); };
    return lmf::render_chat(t.chat_template(), m, add_gen, text(t.bos()), text(t.eos()), thinking);
  });
}

std::vector<float> Model::eval(std::span<const int32_t> tokens, bool all_logits) {
  return guard([&] {
    auto l = impl_->session->eval(tokens, all_logits);
    impl_->history.insert(impl_->history.end(), tokens.begin(), tokens.end());
    return l;
  });
}

std::string Model::generate(const std::string& prompt, int64_t max_tokens, const SamplingOptions& so,
                            const std::function<bool(std::string_view)>& on_text) {
  return guard([&] {
    auto& I = *impl_;
    if (auto bad = lmf::utf8::invalid_message(prompt, "the prompt"); !bad.empty()) throw lmf::Error(bad);
    const auto& t = I.tokenizer();
    auto ids = t.encode(prompt, I.history.empty() && t.add_bos() && prompt.rfind(t.piece(std::max(t.bos(), 0)), 0) != 0, true);
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
    const size_t h0 = I.history.size();
    const int64_t p0 = I.session->pos();
    I.history.insert(I.history.end(), ids.begin(), ids.end());
    lmf::Generator gen(*I.session, sampler, I.history, max_tokens);
    int32_t next = 0;
    try {
      next = gen.first(std::span(I.history).subspan(h0));
    } catch (...) {
      I.history.resize(h0);
      I.session->rewind(p0);
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
  });
}

void Model::reset() {
  impl_->session->reset();
  impl_->history.clear();
}

int64_t Model::n_vocab() const { return impl_->model->hp.n_vocab; }
int64_t Model::position() const { return impl_->session->pos(); }
int64_t Model::context() const { return impl_->session->n_ctx(); }
std::string Model::backend() const { return impl_->backend->description(); }

}  // namespace lmfuse
