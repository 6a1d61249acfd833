#include "server/openai.h"

#include <cmath>
#include <limits>
#include <random>

#include "tokenizer/chat_template.h"
#include "tokenizer/utf8.h"
#include "util/status.h"

namespace lmf::server {

std::string error_body(int status, const std::string& message, const std::string& type, const std::string& code) {
  std::string t = type;
  if (t.empty())
    t = status == 401 ? "authentication_error" : status == 404 ? "not_found_error" : status == 429 ? "rate_limit_error"
        : status >= 500 ? "server_error" : "invalid_request_error";
  json e = {{"message", message}, {"type", t}, {"param", nullptr}, {"code", code.empty() ? json(nullptr) : json(code)}};
  return json{{"error", e}}.dump();
}

namespace {

[[noreturn]] void bad(const std::string& field, const std::string& what) {
  throw ApiError(400, "'" + field + "': " + what, "invalid_request_error", "invalid_value");
}

const json* field(const json& b, const char* name) {
  auto it = b.find(name);
  return it == b.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& b, const char* name, double dflt, double lo, double hi) {
  const json* v = field(b, name);
  if (!v) return dflt;
  if (!v->is_number()) bad(name, "expected a number, got " + std::string(v->type_name()));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) bad(name, cat("must be between ", lo, " and ", hi, ", got ", v->dump()));
  return x;
}

int64_t integer(const json& b, const char* name, int64_t dflt, int64_t lo, int64_t hi) {
  const json* v = field(b, name);
  if (!v) return dflt;
  if (!v->is_number_integer() && !(v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
                                   std::fabs(v->get<double>()) < 9e15))
    bad(name, "expected an integer, got " + v->dump());
  const int64_t x = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX
                    : v->is_number_float()                                                ? int64_t(v->get<double>())
                                                                                          : v->get<int64_t>();
  if (x < lo || x > hi) bad(name, cat("must be between ", lo, " and ", hi, ", got ", v->dump()));
  return x;
}

bool boolean(const json& b, const char* name, bool dflt) {
  const json* v = field(b, name);
  if (!v) return dflt;
  if (!v->is_boolean()) bad(name, "expected true or false, got " + v->dump());
  return v->get<bool>();
}

std::string utf8_string(const json& v, const std::string& name) {
  if (!v.is_string()) bad(name, "expected a string, got " + std::string(v.type_name()));
  return v.get<std::string>();  // nlohmann rejects ill-formed UTF-8 at parse time
}

// A message's content: a string, or a list of {"type": "text", "text": ...} parts.
std::string content_of(const json& m, size_t i) {
  const std::string name = cat("messages[", i, "].content");
  const json* c = field(m, "content");
  if (!c) bad(name, "missing");
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) bad(name, "expected a string or a list of text parts, got " + std::string(c->type_name()));
  std::string out;
  for (size_t k = 0; k < c->size(); ++k) {
    const json& part = (*c)[k];
    const std::string pn = cat(name, "[", k, "]");
    if (!part.is_object() || !part.contains("type") || part["type"] != "text")
      bad(pn, "only parts of type \"text\" are supported");
    out += utf8_string(part.value("text", json()), pn + ".text");
  }
  return out;
}

std::vector<std::string> stops(const json& b) {
  const json* v = field(b, "stop");
  std::vector<std::string> out;
  if (!v) return out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > 16) bad("stop", cat("at most 16 stop strings, got ", v->size()));
    for (size_t i = 0; i < v->size(); ++i) out.push_back(utf8_string((*v)[i], cat("stop[", i, "]")));
  } else {
    bad("stop", "expected a string or a list of strings");
  }
  for (const auto& s : out)
    if (s.empty()) bad("stop", "a stop string must not be empty");
  return out;
}

}  // namespace

ApiRequest parse_request(const json& b, bool chat, const ApiContext& ctx) {
  if (!b.is_object()) throw ApiError(400, "the request body must be a JSON object");
  ApiRequest r;
  r.chat = chat;
  const Tokenizer& t = *ctx.tok;
  if (const json* m = field(b, "model"); m && !m->is_string()) bad("model", "expected a string");
  if (integer(b, "n", 1, 1, 128) != 1) bad("n", "only n = 1 is supported");
  r.stream = boolean(b, "stream", false);
  if (const json* so = field(b, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "expected an object");
    r.include_usage = boolean(*so, "include_usage", false);
  }
  // Sampling: llama-server's defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05).
  SamplingParams& sp = r.gen.sampling;
  sp.temperature = float(number(b, "temperature", 0.8, 0, 2));
  sp.top_p = float(number(b, "top_p", 0.95, 0, 1));
  sp.top_k = int(integer(b, "top_k", 40, -1, 1 << 20));
  sp.min_p = float(number(b, "min_p", 0.05, 0, 1));
  sp.repeat_penalty = float(number(b, "repeat_penalty", 1.0, 0.01, 10));
  sp.presence_penalty = float(number(b, "presence_penalty", 0, -2, 2));
  sp.frequency_penalty = float(number(b, "frequency_penalty", 0, -2, 2));
  if (field(b, "seed")) {
    sp.seed = uint64_t(integer(b, "seed", 0, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
  } else {
    std::random_device rd;
    sp.seed = uint64_t(rd()) << 32 | rd();
  }
  const int64_t cap = ctx.max_tokens_cap > 0 ? ctx.max_tokens_cap : ctx.n_ctx;
  int64_t max_tokens = integer(b, "max_tokens", -1, 1, std::numeric_limits<int64_t>::max());
  if (chat) max_tokens = integer(b, "max_completion_tokens", max_tokens, 1, std::numeric_limits<int64_t>::max());
  if (max_tokens > cap) bad(chat && field(b, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens",
                            cat("must be at most ", cap, " on this server (--max-tokens), got ", max_tokens));
  r.gen.max_tokens = max_tokens > 0 ? max_tokens : cap;  // unset: until the end of the context
  r.gen.stop = stops(b);
  r.gen.ignore_eos = boolean(b, "ignore_eos", false);
  if (chat) {
    r.logprobs = boolean(b, "logprobs", false);
    const int64_t top = integer(b, "top_logprobs", 0, 0, 20);
    if (field(b, "top_logprobs") && !r.logprobs) bad("top_logprobs", "needs \"logprobs\": true");
    r.gen.top_logprobs = r.logprobs ? int(top) : -1;
  } else {
    const int64_t lp = integer(b, "logprobs", -1, 0, 5);
    r.logprobs = lp >= 0;
    r.gen.top_logprobs = int(lp);
  }

  std::string prompt;
  if (chat) {
    const json* msgs = field(b, "messages");
    if (!msgs) bad("messages", "missing");
    if (!msgs->is_array()) bad("messages", "expected a list of messages");
    if (msgs->empty()) bad("messages", "must not be empty");
    std::vector<ChatMessage> conv;
    for (size_t i = 0; i < msgs->size(); ++i) {
      const json& m = (*msgs)[i];
      if (!m.is_object()) bad(cat("messages[", i, "]"), "expected an object");
      const json* role = field(m, "role");
      if (!role || !role->is_string()) bad(cat("messages[", i, "].role"), "expected a string");
      std::string ro = role->get<std::string>();
      if (ro == "developer") ro = "system";
      if (ro != "system" && ro != "user" && ro != "assistant")
        bad(cat("messages[", i, "].role"), "unknown role '" + role->get<std::string>() + "' (system, developer, user, assistant)");
      conv.push_back({ro, content_of(m, i)});
    }
    bool thinking = true;
    if (const json* k = field(b, "chat_template_kwargs")) {
      if (!k->is_object()) bad("chat_template_kwargs", "expected an object");
      thinking = boolean(*k, "enable_thinking", true);
    }
    if (t.chat_template().empty()) throw ApiError(400, "this model has no chat template: use /v1/completions");
    auto text = [&](int32_t id) { return id >= 0 ? t.piece(id) : std::string(); };
    try {
      prompt = render_chat(t.chat_template(), conv, true, text(t.bos()), text(t.eos()), thinking);
    } catch (const Error& e) {
      throw ApiError(400, cat("the chat template refused these messages: ", e.what()));
    }
    r.split_thinking = t.chat_template().find("<think>") != std::string::npos;
    const size_t end = prompt.find_last_not_of(" \n");
    r.thinking_open = r.split_thinking && end != std::string::npos && end >= 6 && prompt.compare(end - 6, 7, "<think>") == 0;
    const bool bos = t.add_bos() && t.bos() >= 0 && prompt.rfind(t.piece(t.bos()), 0) != 0;
    r.gen.prompt = t.encode(prompt, bos, true);
  } else {
    const json* p = field(b, "prompt");
    if (!p) bad("prompt", "missing");
    if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = &(*p)[0];
    if (p->is_string()) {
      prompt = p->get<std::string>();
      if (prompt.empty()) bad("prompt", "must not be empty");
      const bool bos = t.add_bos() && t.bos() >= 0 && prompt.rfind(t.piece(t.bos()), 0) != 0;
      r.gen.prompt = t.encode(prompt, bos, true);
    } else if (p->is_array() && !p->empty() && std::all_of(p->begin(), p->end(), [](const json& x) { return x.is_number_integer(); })) {
      for (const auto& x : *p) {
        const int64_t id = x.get<int64_t>();
        if (id < 0 || id >= t.n_vocab()) bad("prompt", cat("token id ", id, " is outside the vocabulary"));
        r.gen.prompt.push_back(int32_t(id));
      }
    } else if (p->is_array() && p->size() > 1) {
      bad("prompt", "only one prompt per request (n = 1)");
    } else {
      bad("prompt", "expected a string or a list of token ids");
    }
  }
  if (r.gen.prompt.empty()) bad(chat ? "messages" : "prompt", "gives no tokens");
  return r;
}

void ThinkSplitter::feed(const std::string& text, std::string& reasoning, std::string& content) {
  if (!enabled_) {
    content += text;
    return;
  }
  buf_ += text;
  static const std::string open = "<think>", close = "</think>";
  for (bool again = true; again;) {
    again = false;
    if (state_ == kStart) {
      const size_t s = buf_.find_first_not_of(" \n");
      if (s == std::string::npos) return;
      const std::string rest = buf_.substr(s);
      if (rest.compare(0, open.size(), open) == 0) {
        buf_ = rest.substr(open.size());
        state_ = kThink;
        again = true;
      } else if (open.compare(0, rest.size(), rest) == 0) {
        return;  // could still be "<think>"
      } else {
        state_ = kContent;
        again = true;
      }
    } else if (state_ == kThink) {
      const size_t e = buf_.find(close);
      if (e != std::string::npos) {
        reasoning += buf_.substr(0, e);
        buf_ = buf_.substr(e + close.size());
        state_ = kAfterThink;
        again = true;
      } else {
        size_t keep = 0;  // a tail that could begin "</think>"
        for (size_t k = std::min(close.size() - 1, buf_.size()); k > 0; --k)
          if (buf_.compare(buf_.size() - k, k, close, 0, k) == 0) {
            keep = k;
            break;
          }
        reasoning += buf_.substr(0, buf_.size() - keep);
        buf_.erase(0, buf_.size() - keep);
      }
    } else if (state_ == kAfterThink) {  // the blank lines after </think> start no content
      const size_t s = buf_.find_first_not_of("\n");
      if (s == std::string::npos) {
        buf_.clear();
        return;
      }
      buf_.erase(0, s);
      state_ = kContent;
      again = true;
    } else {
      content += buf_;
      buf_.clear();
    }
  }
}

void ThinkSplitter::flush(std::string& reasoning, std::string& content) {
  if (state_ == kThink) reasoning += buf_;
  else if (state_ != kAfterThink) content += buf_;
  buf_.clear();
}

json logprobs_json(const std::vector<TokenLogprob>& lp, const Tokenizer& tok, bool chat, int64_t text_offset0) {
  auto bytes = [](const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(int(c));
    return b;
  };
  // A token's text as JSON can carry (one token may be part of a UTF-8 character).
  auto text = [&](int32_t id) { return utf8::sanitize(tok.piece(id)); };
  if (chat) {
    json content = json::array();
    for (const auto& t : lp) {
      json top = json::array();
      for (const auto& [id, l] : t.top) top.push_back({{"token", text(id)}, {"logprob", l}, {"bytes", bytes(tok.piece(id))}});
      content.push_back({{"token", text(t.id)}, {"logprob", t.logprob}, {"bytes", bytes(tok.piece(t.id))}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_lp = json::array(), top_lp = json::array(), offsets = json::array();
  int64_t off = text_offset0;
  for (const auto& t : lp) {
    tokens.push_back(text(t.id));
    token_lp.push_back(t.logprob);
    json top = json::object();
    for (const auto& [id, l] : t.top) top[text(id)] = l;
    top_lp.push_back(top);
    offsets.push_back(off);
    off += int64_t(tok.piece(t.id).size());
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lp}, {"top_logprobs", top_lp}, {"text_offset", offsets}};
}

json usage_json(const Event& d) {
  return {{"prompt_tokens", d.prompt_tokens},
          {"completion_tokens", d.completion_tokens},
          {"total_tokens", d.prompt_tokens + d.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", d.cached_tokens}}}};
}

json chat_response(const std::string& id, int64_t created, const std::string& model, const std::string& content,
                   const std::string& reasoning, const json& logprobs, const Event& done) {
  json msg = {{"role", "assistant"}, {"content", content}};
  if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
  return {{"id", id},
          {"object", "chat.completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"index", 0}, {"message", msg}, {"logprobs", logprobs}, {"finish_reason", done.finish_reason}}})},
          {"usage", usage_json(done)}};
}

json completion_response(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                         const json& logprobs, const Event& done) {
  return {{"id", id},
          {"object", "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"index", 0}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", done.finish_reason}}})},
          {"usage", usage_json(done)}};
}

json chat_chunk(const std::string& id, int64_t created, const std::string& model, const json& delta, const json& logprobs,
                const std::string& finish_reason) {
  return {{"id", id},
          {"object", "chat.completion.chunk"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"index", 0}, {"delta", delta}, {"logprobs", logprobs},
                                    {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)}}})}};
}

json completion_chunk(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                      const json& logprobs, const std::string& finish_reason) {
  return {{"id", id},
          {"object", "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"index", 0}, {"text", text}, {"logprobs", logprobs},
                                    {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)}}})}};
}

}  // namespace lmf::server
