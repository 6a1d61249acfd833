// Values of the Jinja subset used by chat templates (jinja.h): Python-like dynamic values with
// Python's truthiness, equality, str() and json.dumps() spellings, because templates are
// written against Jinja2 running on Python and their output must match it byte for byte.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace lmf::jinja {

struct JsonStyle;

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion ordered, like Python

struct Value {
  enum class T { Undefined, None, Bool, Int, Float, Str, List, Dict, Func };  // Func: a global function (s = name)
  T t = T::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<List> l;  // shared: Jinja lists/dicts are references
  std::shared_ptr<Dict> d;
  bool is_namespace = false;  // namespace(): a dict whose attributes `set ns.x` may assign
  bool is_tuple = false;      // a list that prints as Python's (a, b)
  // Containers inside containers, counted when a list or dict is made or set into (a scalar 0,
  // an empty list 1), so the evaluator can refuse deep values without walking them. A dict
  // reached through another handle may have grown since: printing and == check their own depth,
  // and release does not recurse (~Value).
  int depth = 0;

  Value() = default;
  Value(const Value&) = default;
  Value(Value&&) noexcept = default;
  Value& operator=(const Value&) = default;
  Value& operator=(Value&&) noexcept = default;
  // Releasing the last handle to a container frees what it holds iteratively, not by recursion,
  // so a deeply nested value cannot overflow the stack as it is destroyed.
  ~Value();
  static Value none() { Value v; v.t = T::None; return v; }
  static Value boolean(bool x) { Value v; v.t = T::Bool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.t = T::Int; v.i = x; return v; }
  static Value number(double x) { Value v; v.t = T::Float; v.f = x; return v; }
  static Value str(std::string x) { Value v; v.t = T::Str; v.s = std::move(x); return v; }
  static Value list(List x = {});
  static Value dict(Dict x = {});

  bool defined() const { return t != T::Undefined; }
  bool is_str() const { return t == T::Str; }
  bool is_num() const { return t == T::Int || t == T::Float || t == T::Bool; }
  double as_double() const { return t == T::Float ? f : t == T::Bool ? double(b) : double(i); }
  bool truthy() const;
  const Value* get(const std::string& key) const;  // dict lookup, nullptr if absent
  void set(const std::string& key, Value v);       // dict insert or replace

  std::string to_str() const;   // Python str(): what {{ v }} prints
  std::string repr() const;     // Python repr()
  std::string repr_at(int depth) const;  // repr() of a value `depth` containers deep
  std::string to_json(const JsonStyle& js, int depth = 0) const;  // json.dumps(...)
  const char* type_name() const;
};

// json.dumps's options as transformers' tojson filter passes them. indent: the unit repeated per
// level (Python's int n is n spaces, 0 or negative none: newlines only), absent for indent=None
// (one line); the separators default to ", " and ": " (item "," with an indent).
struct JsonStyle {
  bool ascii = false;
  std::optional<std::string> indent;
  std::string item_sep = ", ", key_sep = ": ";
  bool sort_keys = false;
};

bool equal(const Value& a, const Value& b, int depth = 0);  // Python ==

// The longest string a render makes: any value, any printed form of one (repr, tojson), and the
// output. A template comes from a model file: past this it is refused, not run out of memory.
inline constexpr size_t kMaxText = size_t(64) << 20;

}  // namespace lmf::jinja
