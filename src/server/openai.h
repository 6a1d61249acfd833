// The OpenAI API's JSON, translated: a request body into generation parameters (every field
// checked: a wrong type or value is an ApiError with status 400 naming the field; unknown fields
// are ignored as OpenAI's clients expect), and the engine's events into response objects and
// stream chunks (chat.completion, chat.completion.chunk, text_completion).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "server/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace lmf::server {

using json = nlohmann::json;

struct ApiError : std::runtime_error {
  ApiError(int status, const std::string& message, std::string type = "invalid_request_error", std::string code = "")
      : std::runtime_error(message), status(status), type(std::move(type)), code(std::move(code)) {}
  int status;
  std::string type, code;
};
// {"error": {"message", "type", "code", "param": null}}
std::string error_body(int status, const std::string& message, const std::string& type = "",
                       const std::string& code = "");

struct ApiContext {
  const Tokenizer* tok = nullptr;
  std::string model_name;
  int64_t n_ctx = 0;
  int64_t max_tokens_cap = 0;  // largest max_tokens accepted
};

struct ApiRequest {
  bool chat = false, stream = false, include_usage = false;
  bool logprobs = false;       // chat: logprobs; completions: logprobs >= 0 given
  bool split_thinking = false; // chat on a model whose template thinks: <think> text goes to reasoning_content
  bool thinking_open = false;  // the generation prompt already opened <think> (the model starts inside it)
  GenParams gen;
};

// Parses and checks a /v1/chat/completions (chat) or /v1/completions body; throws ApiError.
ApiRequest parse_request(const json& body, bool chat, const ApiContext& ctx);

// Splits streamed chat text into reasoning (inside <think> ... </think>) and content.
class ThinkSplitter {
 public:
  ThinkSplitter(bool enabled, bool starts_inside) : enabled_(enabled), state_(starts_inside ? kThink : kStart) {}
  // Feeds text; appends what is now certain to reasoning / content.
  void feed(const std::string& text, std::string& reasoning, std::string& content);
  void flush(std::string& reasoning, std::string& content);

 private:
  enum State { kStart, kThink, kContent, kAfterThink };
  bool enabled_;
  State state_;
  std::string buf_;
};

// Response objects. `id` is the completion's id, `created` its Unix time.
json logprobs_json(const std::vector<TokenLogprob>& lp, const Tokenizer& tok, bool chat, int64_t text_offset0);
json usage_json(const Event& done);
json chat_response(const std::string& id, int64_t created, const std::string& model, const std::string& content,
                   const std::string& reasoning, const json& logprobs, const Event& done);
json completion_response(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                         const json& logprobs, const Event& done);
json chat_chunk(const std::string& id, int64_t created, const std::string& model, const json& delta,
                const json& logprobs, const std::string& finish_reason);
json completion_chunk(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                      const json& logprobs, const std::string& finish_reason);

}  // namespace lmf::server
