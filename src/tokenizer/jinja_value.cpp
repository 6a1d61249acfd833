#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "tokenizer/utf8.h"
#include "util/status.h"

namespace lmf::jinja {

bool Value::truthy() const {
  switch (t) {
    case T::Undefined: case T::None: return false;
    case T::Bool: return b;
    case T::Int: return i != 0;
    case T::Float: return f != 0;
    case T::Str: return !s.empty();
    case T::List: return !l->empty();
    case T::Dict: return !d->empty();
    case T::Func: return true;
  }
  return false;
}

const Value* Value::get(const std::string& key) const {
  if (t != T::Dict) return nullptr;
  for (const auto& [k, v] : *d)
    if (k == key) return &v;
  return nullptr;
}

Value::~Value() {
  const bool last = (l && l.use_count() == 1) || (d && d.use_count() == 1);
  if (!last) return;
  // The outermost release owns the work list; releases that happen while it drains (the
  // children's own) only hand their children to it.
  thread_local std::vector<Value>* pending = nullptr;
  auto hand_over = [this](std::vector<Value>& to) {
    if (l) {
      for (auto& x : *l) to.push_back(std::move(x));
      l->clear();
    }
    if (d) {
      for (auto& kv : *d) to.push_back(std::move(kv.second));
      d->clear();
    }
  };
  if (pending) {
    hand_over(*pending);
    return;
  }
  std::vector<Value> work;
  pending = &work;
  hand_over(work);
  while (!work.empty()) {
    Value v = std::move(work.back());
    work.pop_back();
  }  // each v is destroyed here, handing its children to `work`
  pending = nullptr;
}

Value Value::list(List x) {
  Value v;
  v.t = T::List;
  v.depth = 1;
  for (const auto& e : x) v.depth = std::max(v.depth, e.depth + 1);
  v.l = std::make_shared<List>(std::move(x));
  return v;
}

Value Value::dict(Dict x) {
  Value v;
  v.t = T::Dict;
  v.depth = 1;
  for (const auto& [k, e] : x) v.depth = std::max(v.depth, e.depth + 1);
  v.d = std::make_shared<Dict>(std::move(x));
  return v;
}

void Value::set(const std::string& key, Value v) {
  depth = std::max(depth, v.depth + 1);
  for (auto& [k, x] : *d)
    if (k == key) { x = std::move(v); return; }
  d->emplace_back(key, std::move(v));
}

const char* Value::type_name() const {
  switch (t) {
    case T::Undefined: return "undefined";
    case T::None: return "none";
    case T::Bool: return "bool";
    case T::Int: return "int";
    case T::Float: return "float";
    case T::Str: return "string";
    case T::List: return "list";
    case T::Dict: return is_namespace ? "namespace" : "dict";
    case T::Func: return "function";
  }
  return "?";
}

namespace {
// Python's repr(float): shortest round-trip digits, always with a '.' or exponent.
std::string float_str(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  // Python's repr: the shortest digits that read back as x, in positional notation when the
  // decimal exponent is in [-4, 16), else as d.ddde+XX.
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  const std::string sci(buf, r.ptr);
  const size_t epos = sci.find('e');
  const int exp = std::stoi(sci.substr(epos + 1));
  if (exp < -4 || exp >= 16) return sci;
  std::string digits;
  for (size_t k = 0; k < epos; ++k)
    if (sci[k] >= '0' && sci[k] <= '9') digits += sci[k];
  std::string o = x < 0 || std::signbit(x) ? "-" : "";
  if (exp < 0) return o + "0." + std::string(size_t(-exp - 1), '0') + digits;
  if (digits.size() <= size_t(exp) + 1) return o + digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
  return o + digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
}

std::string py_quote(const std::string& s) {
  // Python picks single quotes unless the string has ' and no ".
  char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string o(1, q);
  for (size_t at = 0; at < s.size();) {
    const auto u = utf8::unit_at(s, at);
    const uint32_t c = u.cp;
    const size_t here = at;
    at += u.len;
    char b[16];
    if (c == '\\') o += "\\\\";
    else if (c == uint32_t(q)) { o += '\\'; o += q; }
    else if (c == '\n') o += "\\n";
    else if (c == '\r') o += "\\r";
    else if (c == '\t') o += "\\t";
    else if (c == utf8::kNotUtf8) o.append(s, here, u.len);  // not UTF-8 (Python strings hold none)
    else if (utf8::is_printable(c)) o.append(s, here, u.len);
    else {  // Python's repr: \xhh, \uhhhh or \Uhhhhhhhh for what it cannot print
      std::snprintf(b, sizeof b, c < 0x100 ? "\\x%02x" : c < 0x10000 ? "\\u%04x" : "\\U%08x", unsigned(c));
      o += b;
    }
  }
  return o + q;
}

// json.dumps's string form: ensure_ascii=False escapes only '"', '\\' and the C0 controls;
// ensure_ascii=True also writes every code point past '~' as \u and four hex digits (one past
// U+FFFF as a UTF-16 surrogate pair). A byte that is not UTF-8 (Python strings cannot hold one) is written as U+FFFD.
std::string json_quote(const std::string& s, bool ascii) {
  std::string o = "\"";
  auto u = [&](uint32_t c) { char b[16]; std::snprintf(b, sizeof b, "\\u%04x", unsigned(c)); o += b; };
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': o += "\\\""; break;
        case '\\': o += "\\\\"; break;
        case '\n': o += "\\n"; break;
        case '\r': o += "\\r"; break;
        case '\t': o += "\\t"; break;
        case '\b': o += "\\b"; break;
        case '\f': o += "\\f"; break;
        default:
          if (c < 0x20 || (ascii && c == 0x7f)) u(c);
          else o += char(c);
      }
      ++i;
      continue;
    }
    const auto [len, cp] = utf8::unit_at(s, i);
    if (cp == utf8::kNotUtf8) {
      if (ascii) u(0xfffd); else o += "\xef\xbf\xbd";
    } else if (!ascii) {
      o.append(s, i, len);
    } else if (cp < 0x10000) {
      u(cp);
    } else {
      u(0xd800 + ((cp - 0x10000) >> 10)), u(0xdc00 + ((cp - 0x10000) & 0x3ff));
    }
    i += len;
  }
  return o + "\"";
}
}  // namespace

std::string Value::to_str() const {
  switch (t) {
    case T::Undefined: return "";
    case T::Str: return s;
    default: return repr();
  }
}

namespace {
// Printing and comparing recurse through containers; a value holding itself (a namespace set to
// contain itself) or nested past this is an error, not a stack overflow. The evaluator refuses to
// build values nested deeper than 64 (jinja_eval.cpp), so only such cycles reach this.
constexpr int kMaxPrintDepth = 128;
void check_print_depth(int depth) {
  if (depth > kMaxPrintDepth) LMF_FAIL("chat template: a value nested more than ", kMaxPrintDepth, " levels deep (or holding itself)");
}
// A container's printed form grows item by item; each item's own form is checked as it is made,
// so the check after each append bounds what is held to a few times kMaxText.
void check_printed(size_t n) {
  if (n > kMaxText) LMF_FAIL("chat template: a printed value longer than ", kMaxText >> 20, " MiB");
}
}  // namespace

std::string Value::repr() const { return repr_at(0); }

std::string Value::repr_at(int depth) const {
  check_print_depth(depth);
  switch (t) {
    case T::Func: return "<function " + s + ">";
    case T::Undefined: return depth == 0 ? "" : "Undefined";  // Jinja2's Undefined inside a container
    case T::None: return "None";
    case T::Bool: return b ? "True" : "False";
    case T::Int: return std::to_string(i);
    case T::Float: return float_str(f);
    case T::Str: return py_quote(s);
    case T::List: {
      std::string o = is_tuple ? "(" : "[";
      for (size_t k = 0; k < l->size(); ++k) {
        o += (k ? ", " : "") + (*l)[k].repr_at(depth + 1);
        check_printed(o.size());
      }
      if (is_tuple) return o + (l->size() == 1 ? ",)" : ")");
      return o + "]";
    }
    case T::Dict: {
      if (is_namespace) return "<Namespace>";
      std::string o = "{";
      for (size_t k = 0; k < d->size(); ++k) {
        o += (k ? ", " : "") + py_quote((*d)[k].first) + ": " + (*d)[k].second.repr_at(depth + 1);
        check_printed(o.size());
      }
      return o + "}";
    }
  }
  return "";
}

std::string Value::to_json(const JsonStyle& js, int depth) const {
  check_print_depth(depth);
  const std::string* indent = js.indent ? &*js.indent : nullptr;
  auto nl = [&](int dd) {  // a newline and dd indents
    if (!indent) return std::string();
    check_printed(indent->size() * size_t(dd) + 1);
    std::string r = "\n";
    for (int k = 0; k < dd; ++k) r += *indent;
    return r;
  };
  switch (t) {
    case T::Func: LMF_FAIL("chat template: tojson of a function");
    case T::Undefined: LMF_FAIL("chat template: tojson of an undefined value");
    case T::None: return "null";
    case T::Bool: return b ? "true" : "false";
    case T::Int: return std::to_string(i);
    case T::Float: return std::isfinite(f) ? float_str(f) : (std::isnan(f) ? "NaN" : f > 0 ? "Infinity" : "-Infinity");
    case T::Str: return json_quote(s, js.ascii);
    case T::List: {
      if (l->empty()) return "[]";
      std::string o = "[";
      for (size_t k = 0; k < l->size(); ++k) {
        o += (k ? js.item_sep : "") + nl(depth + 1) + (*l)[k].to_json(js, depth + 1);
        check_printed(o.size());
      }
      return o + nl(depth) + "]";
    }
    case T::Dict: {
      if (d->empty()) return "{}";
      std::vector<size_t> order(d->size());
      for (size_t k = 0; k < order.size(); ++k) order[k] = k;
      if (js.sort_keys)  // Python compares str keys by code point: UTF-8's byte order
        std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return (*d)[x].first < (*d)[y].first; });
      std::string o = "{";
      for (size_t k = 0; k < order.size(); ++k) {
        const auto& [key, v] = (*d)[order[k]];
        o += (k ? js.item_sep : "") + nl(depth + 1) + json_quote(key, js.ascii) + js.key_sep + v.to_json(js, depth + 1);
        check_printed(o.size());
      }
      return o + nl(depth) + "}";
    }
  }
  return "";
}

bool equal(const Value& a, const Value& b, int depth) {
  using T = Value::T;
  check_print_depth(depth);
  if (a.is_num() && b.is_num()) {
    if (a.t != T::Float && b.t != T::Float) return a.as_double() == b.as_double() && (a.t == T::Bool ? int64_t(a.b) : a.i) == (b.t == T::Bool ? int64_t(b.b) : b.i);
    return a.as_double() == b.as_double();
  }
  if (a.t != b.t) return false;
  switch (a.t) {
    case T::Undefined: case T::None: return true;
    case T::Str: case T::Func: return a.s == b.s;
    case T::List:  // a tuple never equals a list in Python
      if (a.is_tuple != b.is_tuple || a.l->size() != b.l->size()) return false;
      for (size_t k = 0; k < a.l->size(); ++k)
        if (!equal((*a.l)[k], (*b.l)[k], depth + 1)) return false;
      return true;
    case T::Dict:
      if (a.d == b.d) return true;
      if (a.d->size() != b.d->size()) return false;
      for (const auto& [k, v] : *a.d) {
        const Value* o = b.get(k);
        if (!o || !equal(v, *o, depth + 1)) return false;
      }
      return true;
    default: return false;
  }
}

}  // namespace lmf::jinja
