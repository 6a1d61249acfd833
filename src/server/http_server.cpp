#include "server/http_server.h"

#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "server/openai.h"
#include "tokenizer/utf8.h"
#include "util/status.h"

namespace lmf::server {

namespace {

const char kChatPage[] =
#include "server/chat_page.inc"
    ;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string new_id(const char* prefix) {
  static std::mt19937_64 rng{std::random_device{}()};
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  char b[40];
  std::snprintf(b, sizeof b, "%s-%016llx", prefix, (unsigned long long)rng());
  return b;
}

void send_error(httplib::Response& res, int status, const std::string& msg, const std::string& type = "",
                const std::string& code = "") {
  res.status = status;
  res.set_content(error_body(status, msg, type, code), "application/json");
}

constexpr auto kPoll = std::chrono::milliseconds(100);

}  // namespace

struct HttpServer::Impl {
  Engine& engine;
  const Tokenizer& tok;
  ServerConfig cfg;
  Metrics metrics;
  std::unique_ptr<Scheduler> sched;
  httplib::Server svr;
  std::atomic<bool> stopping{false};

  Impl(Engine& e, const Tokenizer& t, const ServerConfig& c) : engine(e), tok(t), cfg(c) {
    metrics.model_name = c.model_name;
    metrics.version = LMFUSE_VERSION;
    sched = std::make_unique<Scheduler>(e, t, c.sched, metrics);
  }

  ApiContext api() const {
    ApiContext a;
    a.tok = &tok;
    a.model_name = cfg.model_name;
    a.n_ctx = engine.n_ctx();
    a.max_tokens_cap = cfg.max_tokens_cap;
    return a;
  }

  bool authorized(const httplib::Request& req, httplib::Response& res) {
    if (cfg.api_key.empty()) return true;
    const std::string h = req.get_header_value("Authorization");
    if (h == "Bearer " + cfg.api_key) return true;
    send_error(res, 401, h.empty() ? "missing API key: send \"Authorization: Bearer KEY\"" : "invalid API key",
               "authentication_error", "invalid_api_key");
    return false;
  }

  json body_of(const httplib::Request& req) {
    try {
      return json::parse(req.body);
    } catch (const json::parse_error& e) {
      throw ApiError(400, cat("the request body is not valid JSON: ", e.what()), "invalid_request_error", "invalid_json");
    }
  }

  void generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    if (!authorized(req, res)) return;
    set_load_headers(res, sched->load());  // what this replica holds as the request arrives
    ApiRequest ar = parse_request(body_of(req), chat, api());
    Refusal why;
    auto r = sched->submit(std::move(ar.gen), &why);
    if (!r) {
      if (why.status == 503 || why.status == 429)
        res.set_header("Retry-After", std::to_string(why.status == 503 ? kRetryAfterUnavailable : kRetryAfterBusy));
      send_error(res, why.status, why.why, "", why.code);
      return;
    }
    const std::string id = new_id(chat ? "chatcmpl" : "cmpl");
    const int64_t created = unix_now();
    const std::string model = cfg.model_name;
    if (!ar.stream) {
      std::string text, reasoning, content;
      std::vector<TokenLogprob> lps;
      ThinkSplitter split(ar.split_thinking, ar.thinking_open);
      for (;;) {
        auto ev = r->pop(kPoll);
        if (!ev) continue;  // the scheduler always ends a request with Done or Error
        if (ev->kind == Event::Error) {
          send_error(res, ev->status, ev->error);
          return;
        }
        text += ev->text;
        lps.insert(lps.end(), ev->logprobs.begin(), ev->logprobs.end());
        if (ev->kind == Event::Done) {
          const json lp = ar.logprobs ? logprobs_json(lps, tok, chat, 0) : json(nullptr);
          if (chat) {
            split.feed(text, reasoning, content);
            split.flush(reasoning, content);
            res.set_content(chat_response(id, created, model, content, reasoning, lp, *ev).dump(), "application/json");
          } else {
            res.set_content(completion_response(id, created, model, text, lp, *ev).dump(), "application/json");
          }
          return;
        }
      }
    }
    // Server-sent events: one chunk per event, then the finish chunk, the usage chunk when asked,
    // and [DONE]. A write that fails (the client went away) cancels the request.
    struct State {
      std::shared_ptr<Request> r;
      ThinkSplitter split;
      bool first = true;
      int64_t offset = 0;
    };
    auto st = std::make_shared<State>(State{r, ThinkSplitter(ar.split_thinking, ar.thinking_open)});
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, st, ar, chat, id, created, model](size_t, httplib::DataSink& sink) {
          auto send = [&](const json& j) {
            const std::string s = "data: " + j.dump() + "\n\n";
            return sink.write(s.data(), s.size());
          };
          for (;;) {
            auto ev = st->r->pop(kPoll);
            if (!ev) {
              if (!sink.is_writable()) {
                st->r->cancelled = true;
                return false;
              }
              continue;
            }
            if (ev->kind == Event::Error) {
              const std::string s = "data: " + error_body(ev->status, ev->error) + "\n\ndata: [DONE]\n\n";
              sink.write(s.data(), s.size());
              sink.done();
              return true;
            }
            const json lp = ar.logprobs && !ev->logprobs.empty() ? logprobs_json(ev->logprobs, tok, chat, st->offset) : json(nullptr);
            bool ok = true;
            if (chat) {
              std::string reasoning, content;
              st->split.feed(ev->text, reasoning, content);
              if (ev->kind == Event::Done) st->split.flush(reasoning, content);
              json delta = json::object();
              if (st->first) delta["role"] = "assistant";
              if (!content.empty()) delta["content"] = content;
              if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
              if (st->first || delta.contains("content") || delta.contains("reasoning_content") || !lp.is_null())
                ok = send(chat_chunk(id, created, model, delta, lp, ""));
              st->first = false;
            } else if (!ev->text.empty() || !lp.is_null()) {
              ok = send(completion_chunk(id, created, model, ev->text, lp, ""));
            }
            st->offset += int64_t(ev->text.size());
            if (!ok) {
              st->r->cancelled = true;
              return false;
            }
            if (ev->kind == Event::Done) {
              ok = chat ? send(chat_chunk(id, created, model, json::object(), nullptr, ev->finish_reason))
                        : send(completion_chunk(id, created, model, "", nullptr, ev->finish_reason));
              if (ok && ar.include_usage) {
                json u = {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
                          {"model", model}, {"choices", json::array()}, {"usage", usage_json(*ev)}};
                ok = send(u);
              }
              const std::string d = "data: [DONE]\n\n";
              if (ok) sink.write(d.data(), d.size());
              sink.done();
              return ok;
            }
          }
        },
        [st](bool success) {
          if (!success) st->r->cancelled = true;  // the connection ended first
        });
  }

  void routes() {
    svr.set_payload_max_length(size_t(cfg.max_body_bytes));
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      try {
        std::rethrow_exception(ep);
      } catch (const ApiError& e) {
        send_error(res, e.status, e.what(), e.type, e.code);
      } catch (const Error& e) {  // an lmfuse error about the request's content
        send_error(res, 400, e.what());
      } catch (const std::exception& e) {
        send_error(res, 500, cat("internal error: ", e.what()));
      } catch (...) {
        send_error(res, 500, "internal error");
      }
    });
    // Statuses httplib sets itself (404, 413, 400 on a bad request line) get a JSON body too.
    svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      const std::string msg = res.status == 404   ? "no route " + req.method + " " + req.path
                              : res.status == 413 ? "the request body is too large (--max-body)"
                              : res.status == 405 ? "method not allowed"
                              : res.status == 400 ? "malformed request line or header (a header holds at most 8 KiB)"
                                                  : cat("HTTP ", res.status);
      res.set_content(error_body(res.status, msg), "application/json");
    });
    svr.Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content(kChatPage, "text/html; charset=utf-8"); });
    svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (stopping) return send_error(res, 503, "shutting down", "server_error");
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    add_ops_routes(svr, *sched, cfg.ops,
                   [this](const httplib::Request& req, httplib::Response& res) { return authorized(req, res); });
    svr.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      res.set_content(metrics.render(), "text/plain; version=0.0.4");
    });
    auto models = [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      json m = {{"id", cfg.model_name}, {"object", "model"}, {"created", unix_now()}, {"owned_by", "lmfuse"},
                {"meta", {{"n_ctx", engine.n_ctx()}, {"n_vocab", engine.n_vocab()}, {"backend", engine.backend().description()},
                          {"max_active", cfg.sched.max_active}, {"max_queue", cfg.sched.max_queue},
                          {"max_tokens", cfg.max_tokens_cap > 0 ? cfg.max_tokens_cap : engine.n_ctx()},
                          {"version", LMFUSE_VERSION}}}};
      res.set_content(json{{"object", "list"}, {"data", json::array({m})}}.dump(), "application/json");
    };
    svr.Get("/v1/models", models);
    svr.Get("/models", models);
    for (const char* p : {"/v1/chat/completions", "/chat/completions"})
      svr.Post(p, [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, true); });
    for (const char* p : {"/v1/completions", "/completions"})
      svr.Post(p, [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, false); });
    svr.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      const json b = body_of(req);
      if (!b.is_object()) throw ApiError(400, "the request body must be a JSON object");
      const json* c = b.contains("content") ? &b["content"] : b.contains("text") ? &b["text"] : nullptr;
      if (!c || !c->is_string()) throw ApiError(400, "'content': expected a string");
      const bool add_special = b.value("add_special", false);
      const std::string s = c->get<std::string>();
      const bool bos = add_special && tok.bos() >= 0;
      res.set_content(json{{"tokens", tok.encode(s, bos, true)}}.dump(), "application/json");
    });
    svr.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      const json b = body_of(req);
      if (!b.is_object() || !b.contains("tokens") || !b["tokens"].is_array())
        throw ApiError(400, "'tokens': expected a list of token ids");
      std::vector<int32_t> ids;
      for (const auto& x : b["tokens"]) {
        if (!x.is_number_integer()) throw ApiError(400, "'tokens': expected integers");
        const int64_t id = x.get<int64_t>();
        if (id < 0 || id >= tok.n_vocab()) throw ApiError(400, cat("'tokens': id ", id, " is outside the vocabulary"));
        ids.push_back(int32_t(id));
      }
      res.set_content(json{{"content", utf8::sanitize(tok.decode(ids))}}.dump(), "application/json");
    });
  }
};

HttpServer::HttpServer(Engine& e, const Tokenizer& t, const ServerConfig& c) : impl_(std::make_unique<Impl>(e, t, c)) {
  const int threads = c.http_threads > 0 ? c.http_threads : int(c.sched.max_active + c.sched.max_queue + 8);
  impl_->svr.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  impl_->routes();
}

HttpServer::~HttpServer() = default;

void HttpServer::run(const std::function<void(int)>& on_listening) {
  auto& s = impl_->svr;
  int port = impl_->cfg.port;
  if (port == 0) {
    port = s.bind_to_any_port(impl_->cfg.host);
    if (port < 0) LMF_FAIL("cannot listen on ", impl_->cfg.host, ": no free port");
  } else if (!s.bind_to_port(impl_->cfg.host, port)) {
    LMF_FAIL("cannot listen on ", impl_->cfg.host, ":", port, " (in use, or not an address of this machine)");
  }
  if (on_listening) on_listening(port);
  s.listen_after_bind();
}

void HttpServer::stop(std::chrono::milliseconds drain) {
  impl_->stopping = true;
  impl_->sched->stop(drain);  // every waiting HTTP thread gets its request's last event
  impl_->svr.stop();
}

}  // namespace lmf::server
