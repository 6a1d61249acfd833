// Evaluator for the Jinja subset: Python semantics for operators, truthiness, str(), slicing
// (by code point), and the filters/tests/methods chat templates use.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <iterator>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "tokenizer/jinja.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/utf8.h"
#include "util/status.h"

namespace lmf::jinja {

namespace {

using T = Value::T;

[[noreturn]] void fail(const Expr& e, const std::string& what) {
  LMF_FAIL("chat template line ", e.line, ": ", what);
}

// Budgets of one render. A template comes from a model file (untrusted input); real chat
// templates stay orders of magnitude below each, and one that does not is refused by name
// instead of hanging, exhausting memory, or overflowing the stack.
constexpr int64_t kMaxSteps = 2'000'000;      // expressions evaluated + loop iterations (~1 s)
// (kMaxText, jinja_value.h: bytes of any string, of a printed value, and of the output)
constexpr size_t kMaxItems = size_t(1) << 20;  // elements of any list or dict
constexpr int kMaxDepth = 64;                  // containers inside containers

void check_text(const Expr& e, size_t n) {
  if (n > kMaxText) fail(e, "a string longer than " + std::to_string(kMaxText >> 20) + " MiB");
}

// Strings index, slice and count by code point (an ill-formed byte sequence counts as one). The
// byte offset where each code point starts, then s.size(): 4 bytes per code point, where a string
// per code point would take 32 (a string may be 64 MiB).
std::vector<uint32_t> cp_starts(const std::string& s) {
  std::vector<uint32_t> at;
  for (size_t i = 0; i < s.size(); i += utf8::unit_at(s, i).len) at.push_back(uint32_t(i));
  at.push_back(uint32_t(s.size()));
  return at;
}
std::string cp_at(const std::string& s, const std::vector<uint32_t>& at, size_t k) { return s.substr(at[k], at[k + 1] - at[k]); }
size_t cp_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += utf8::unit_at(s, i).len) ++n;
  return n;
}

// Python's str.strip / lstrip / rstrip: chars nullptr strips whitespace (str.isspace), else the
// code points of *chars. One pass, nothing held per character (a string may be 64 MiB).
std::string strip(const std::string& s, const std::string* chars, bool left, bool right) {
  std::unordered_set<uint32_t> set;
  if (chars)
    for (size_t i = 0; i < chars->size();) {
      const auto u = utf8::unit_at(*chars, i);
      set.insert(u.cp);
      i += u.len;
    }
  auto drop = [&](uint32_t cp) { return chars ? set.count(cp) != 0 : utf8::is_space(cp); };
  size_t b = s.size(), e = 0;  // the first kept unit's start, the last kept unit's end
  for (size_t i = 0; i < s.size();) {
    const auto u = utf8::unit_at(s, i);
    if (!drop(u.cp) || (!left && b == s.size())) b = std::min(b, i);
    if (!drop(u.cp) || !right) e = i + u.len;
    i += u.len;
  }
  return b < e ? s.substr(b, e - b) : "";
}

// Python's int(s) (base 10, N = int64_t) and float(s) (N = double: decimal or exponent form, inf,
// infinity, nan) of a string: spaces around the number allowed (str.strip), one sign, the rest the
// whole number; nullopt where Python raises ValueError.
template <class N>
std::optional<N> py_number(const std::string& s) {
  const std::string t = strip(s, nullptr, true, true);
  const char *b = t.data(), *end = b + t.size();
  if (b != end && *b == '+') {
    ++b;
    if (b != end && *b == '-') return std::nullopt;
  }
  N v{};
  auto r = std::from_chars(b, end, v);
  if (b == end || r.ec != std::errc() || r.ptr != end) return std::nullopt;
  return v;
}

// Jinja2's title filter: the text split before runs of '-', whitespace, '(', '{', '[', '<'; each
// piece's first character upper-cased, the rest lower-cased (not str.title(): "they're" stays).
std::string jinja_title(const std::string& s) {
  std::string r;
  auto delim = [](uint32_t cp) { return cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || utf8::is_space(cp); };
  for (size_t i = 0; i < s.size();) {  // a piece: a run of delimiters or of other characters
    const auto first = utf8::unit_at(s, i);
    size_t j = i + first.len;
    while (j < s.size()) {
      const auto u = utf8::unit_at(s, j);
      if (delim(u.cp) != delim(first.cp)) break;
      j += u.len;
    }
    r += utf8::change_case(std::string_view(s).substr(i, first.len), utf8::Case::Upper);
    r += utf8::change_case(std::string_view(s).substr(i + first.len, j - i - first.len), utf8::Case::Lower);
    i = j;
  }
  return r;
}

std::string lower(const std::string& s) { return utf8::change_case(s, utf8::Case::Lower); }
std::string upper(const std::string& s) { return utf8::change_case(s, utf8::Case::Upper); }

// Python slice indices over n elements.
std::vector<size_t> slice_idx(int64_t n, const Value* a, const Value* b, const Value* c) {
  int64_t step = c && c->t == T::Int ? c->i : 1;
  if (step == 0) LMF_FAIL("chat template: slice step cannot be zero");
  auto norm = [&](const Value* v, int64_t dflt, int64_t lo, int64_t hi) {
    if (!v || v->t == T::None || v->t == T::Undefined) return dflt;
    int64_t x = v->i;
    if (x < 0) x += n;
    return std::clamp(x, lo, hi);
  };
  std::vector<size_t> out;
  if (step > 0) {
    int64_t s = norm(a, 0, 0, n), e = norm(b, n, 0, n);
    for (int64_t i = s; i < e; i += step) out.push_back(size_t(i));
  } else {
    int64_t s = norm(a, n - 1, -1, n - 1), e = norm(b, -1, -1, n - 1);
    for (int64_t i = s; i > e; i += step) out.push_back(size_t(i));
  }
  return out;
}

struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  const Value* get(size_t i, const char* name) const {
    if (i < pos.size()) return &pos[i];
    for (const auto& [k, v] : kw)
      if (k == name) return &v;
    return nullptr;
  }
};

class Interp {
 public:
  explicit Interp(const Value& ctx) {
    scopes_.emplace_back();
    if (ctx.t == T::Dict)
      for (const auto& [k, v] : *ctx.d) scopes_[0][k] = v;
  }
  // A namespace is the one container a template can change after making it, so every reference
  // cycle ({% set ns.me = ns %}, a namespace holding one that holds it) runs through one: emptying
  // the namespaces the render made frees those cycles, which shared ownership alone would leak.
  ~Interp() {
    for (const auto& w : namespaces_)
      if (auto d = w.lock()) Dict().swap(*d);
  }
  Interp(const Interp&) = delete;
  Interp& operator=(const Interp&) = delete;

  enum class Flow { Normal, Break, Continue };

  Flow exec(const std::vector<Node>& nodes) {
    for (const Node& n : nodes) {
      switch (n.k) {
        case Node::K::Text: out_ += n.text; break;
        case Node::K::Output:
          out_ += eval(*n.expr).to_str();
          if (out_.size() > kMaxText) LMF_FAIL("chat template line ", n.line, ": output longer than ", kMaxText >> 20, " MiB");
          break;
        case Node::K::If:
          for (const auto& [cond, body] : n.branches) {
            if (!cond || eval(*cond).truthy()) {
              Flow f = exec(body);
              if (f != Flow::Normal) return f;
              break;
            }
          }
          break;
        case Node::K::Set: {
          Value v = eval(*n.expr);
          if (n.targets.size() == 1) {
            scopes_.back()[n.targets[0]] = std::move(v);
          } else {
            Value* ns = find(n.targets[0]);
            if (!ns || ns->t != T::Dict || !ns->is_namespace)
              LMF_FAIL("chat template line ", n.line, ": cannot set attribute '", n.targets[1],
                       "' of '", n.targets[0], "' (not a namespace)");
            ns->set(n.targets[1], std::move(v));
            check_depth(*n.expr, ns->depth);
          }
          break;
        }
        case Node::K::For: run_for(n); break;
        case Node::K::Break: return Flow::Break;
        case Node::K::Continue: return Flow::Continue;
      }
    }
    return Flow::Normal;
  }

  std::string out_;

 private:
  int64_t steps_ = 0;
  std::vector<std::unordered_map<std::string, Value>> scopes_;
  std::vector<std::weak_ptr<Dict>> namespaces_;  // made by namespace(), emptied at the end

  Value* find(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
      if (auto f = it->find(name); f != it->end()) return &f->second;
    return nullptr;
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    // The global functions exist as values too ("{% if strftime_now is defined %}").
    for (const char* fn : {"namespace", "range", "dict", "raise_exception", "strftime_now"})
      if (name == fn) {
        Value v;
        v.t = T::Func;
        v.s = name;
        return v;
      }
    return Value();
  }

  std::vector<Value> iterate(const Value& v, const Node& n) {
    switch (v.t) {
      case T::Undefined: return {};
      case T::List: return *v.l;
      case T::Dict: {
        std::vector<Value> keys;
        for (const auto& [k, x] : *v.d) keys.push_back(Value::str(k));
        return keys;
      }
      case T::Str: {
        const auto at = cp_starts(v.s);
        if (at.size() - 1 > kMaxItems)
          LMF_FAIL("chat template line ", n.line, ": iterating over more than ", kMaxItems, " characters");
        std::vector<Value> cs;
        for (size_t k = 0; k + 1 < at.size(); ++k) cs.push_back(Value::str(cp_at(v.s, at, k)));
        return cs;
      }
      default:
        LMF_FAIL("chat template line ", n.line, ": cannot iterate over ", v.type_name());
    }
  }

  void bind(std::unordered_map<std::string, Value>& scope, const Node& n, const Value& item) {
    if (n.targets.size() == 1) {
      scope[n.targets[0]] = item;
      return;
    }
    if (item.t != T::List || item.l->size() != n.targets.size())
      LMF_FAIL("chat template line ", n.line, ": cannot unpack ", item.type_name(), " into ",
               n.targets.size(), " loop variables");
    for (size_t k = 0; k < n.targets.size(); ++k) scope[n.targets[k]] = (*item.l)[k];
  }

  void run_for(const Node& n) {
    std::vector<Value> items = iterate(eval(*n.expr), n);
    if (n.cond) {
      std::vector<Value> kept;
      for (const auto& it : items) {
        scopes_.emplace_back();
        bind(scopes_.back(), n, it);
        bool ok = eval(*n.cond).truthy();
        scopes_.pop_back();
        if (ok) kept.push_back(it);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec(n.else_body);
      return;
    }
    const int64_t len = int64_t(items.size());
    for (int64_t i = 0; i < len; ++i) {
      step(*n.expr);
      scopes_.emplace_back();
      auto& sc = scopes_.back();
      bind(sc, n, items[size_t(i)]);
      Value loop = Value::dict({{"index", Value::integer(i + 1)},
                                {"index0", Value::integer(i)},
                                {"revindex", Value::integer(len - i)},
                                {"revindex0", Value::integer(len - i - 1)},
                                {"first", Value::boolean(i == 0)},
                                {"last", Value::boolean(i == len - 1)},
                                {"length", Value::integer(len)},
                                {"previtem", i > 0 ? items[size_t(i - 1)] : Value()},
                                {"nextitem", i + 1 < len ? items[size_t(i + 1)] : Value()}});
      sc["loop"] = loop;
      Flow f = exec(n.body);
      scopes_.pop_back();
      if (f == Flow::Break) break;
    }
  }

  Args args_of(const Expr& e, size_t first) {
    Args a;
    for (size_t k = first; k < e.a.size(); ++k) a.pos.push_back(eval(*e.a[k]));
    for (const auto& [k, x] : e.kwargs) a.kw.emplace_back(k, eval(*x));
    return a;
  }

  // Jinja2: an attribute or item of an undefined value is an error (UndefinedError), where the
  // undefined value itself prints as "" and tests as not defined.
  [[noreturn]] void undefined(const Expr& e, const Expr& base) {
    std::string path;
    for (const Expr* x = &base;; x = x->a[0].get()) {
      if (x->k == Expr::K::Name) { path = x->name + path; break; }
      if (x->k != Expr::K::Attr) fail(e, "an attribute or item of an undefined value");
      path = "." + x->name + path;
    }
    fail(e, "'" + path + "' is undefined");
  }

  Value index(const Expr& e, const Value& obj, const Value& key) {
    if (obj.t == T::Dict) {
      if (!key.is_str()) return Value();
      const Value* v = obj.get(key.s);
      return v ? *v : Value();
    }
    if ((obj.t == T::List || obj.t == T::Str) && (key.t == T::Int || key.t == T::Bool)) {
      if (obj.t == T::List) {
        int64_t n = int64_t(obj.l->size()), i = key.i;
        if (i < 0) i += n;
        return i >= 0 && i < n ? (*obj.l)[size_t(i)] : Value();
      }
      const auto at = cp_starts(obj.s);
      int64_t n = int64_t(at.size() - 1), i = key.i;
      if (i < 0) i += n;
      return i >= 0 && i < n ? Value::str(cp_at(obj.s, at, size_t(i))) : Value();
    }
    if (obj.t == T::Undefined) undefined(e, *e.a[0]);
    fail(e, std::string("cannot index ") + obj.type_name() + " with " + key.type_name());
  }

  void step(const Expr& e) {
    if (++steps_ > kMaxSteps) fail(e, "rendering takes more than " + std::to_string(kMaxSteps) + " steps; refused");
  }

  // Every value an expression makes passes here: the step budget and the size limits.
  Value eval(const Expr& e) {
    step(e);
    Value v = eval_node(e);
    if (v.is_str()) check_text(e, v.s.size());
    else if ((v.t == T::List && v.l->size() > kMaxItems) || (v.t == T::Dict && v.d->size() > kMaxItems))
      fail(e, "a list or dict of more than " + std::to_string(kMaxItems) + " items");
    check_depth(e, v.depth);
    return v;
  }

  // Value::depth as counted when containers are made or set into.
  void check_depth(const Expr& e, int depth) {
    if (depth > kMaxDepth) fail(e, "values nested more than " + std::to_string(kMaxDepth) + " levels deep");
  }

  Value eval_node(const Expr& e) {
    switch (e.k) {
      case Expr::K::Lit: return e.lit;
      case Expr::K::Name: return lookup(e.name);
      case Expr::K::Attr: {
        Value o = eval(*e.a[0]);
        if (o.t == T::Undefined) undefined(e, *e.a[0]);
        if (o.t == T::Dict) {
          const Value* v = o.get(e.name);
          return v ? *v : Value();
        }
        return Value();
      }
      case Expr::K::Index: return index(e, eval(*e.a[0]), eval(*e.a[1]));
      case Expr::K::Slice: {
        Value o = eval(*e.a[0]);
        Value p[3];
        for (int k = 0; k < 3; ++k)
          if (e.a[size_t(k + 1)]) p[k] = eval(*e.a[size_t(k + 1)]);
        const Value* pp[3];
        for (int k = 0; k < 3; ++k) pp[k] = e.a[size_t(k + 1)] ? &p[k] : nullptr;
        if (o.t == T::List) {
          List r;
          for (size_t i : slice_idx(int64_t(o.l->size()), pp[0], pp[1], pp[2])) r.push_back((*o.l)[i]);
          Value out = Value::list(std::move(r));
          out.is_tuple = o.is_tuple;  // a tuple's slice is a tuple
          return out;
        }
        if (o.t == T::Str) {
          const auto at = cp_starts(o.s);
          std::string r;
          for (size_t i : slice_idx(int64_t(at.size() - 1), pp[0], pp[1], pp[2])) r += cp_at(o.s, at, i);
          return Value::str(r);
        }
        fail(e, std::string("cannot slice ") + o.type_name());
      }
      case Expr::K::Call:
        if (e.method) return method(e, eval(*e.a[0]), args_of(e, 1));
        return call(e, args_of(e, 0));
      case Expr::K::Filter: return filter(e, eval(*e.a[0]), args_of(e, 1));
      case Expr::K::Test: {
        bool r = test(e, eval(*e.a[0]), args_of(e, 1));
        return Value::boolean(e.negate ? !r : r);
      }
      case Expr::K::Unary: {
        Value v = eval(*e.a[0]);
        if (e.name == "not") return Value::boolean(!v.truthy());
        if (!v.is_num()) fail(e, std::string("bad operand for unary ") + e.name + ": " + v.type_name());
        if (e.name == "+") return v;
        if (v.t == T::Float) return Value::number(-v.f);
        const int64_t x = v.t == T::Bool ? int64_t(v.b) : v.i;
        if (x == INT64_MIN) fail(e, "integer overflow in unary - (integers are 64-bit here)");
        return Value::integer(-x);
      }
      case Expr::K::Binary: return binary(e);
      case Expr::K::Ternary:
        if (eval(*e.a[1]).truthy()) return eval(*e.a[0]);
        return e.a[2] ? eval(*e.a[2]) : Value();
      case Expr::K::ListLit: {
        List l;
        for (const auto& x : e.a) l.push_back(eval(*x));
        Value v = Value::list(std::move(l));
        v.is_tuple = e.name == "tuple";
        return v;
      }
      case Expr::K::DictLit: {
        Value d = Value::dict();
        for (size_t k = 0; k + 1 < e.a.size(); k += 2) {
          Value key = eval(*e.a[k]);
          if (!key.is_str()) fail(e, "dict keys must be strings");
          d.set(key.s, eval(*e.a[k + 1]));
        }
        return d;
      }
    }
    fail(e, "bad expression");
  }

  static int64_t ival(const Value& v) { return v.t == T::Bool ? int64_t(v.b) : v.i; }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value l = eval(*e.a[0]);
      return l.truthy() ? eval(*e.a[1]) : l;
    }
    if (op == "or") {
      Value l = eval(*e.a[0]);
      return l.truthy() ? l : eval(*e.a[1]);
    }
    Value l = eval(*e.a[0]), r = eval(*e.a[1]);
    if (op == "==") return Value::boolean(equal(l, r));
    if (op == "!=") return Value::boolean(!equal(l, r));
    if (op == "~") return Value::str(l.to_str() + r.to_str());
    if (op == "in" || op == "not in") {
      bool in = false;
      if (r.t == T::Str) {
        if (!l.is_str()) fail(e, std::string("'in <string>' requires a string, got ") + l.type_name());
        in = r.s.find(l.s) != std::string::npos;
      } else if (r.t == T::List) {
        for (const auto& x : *r.l) in = in || equal(x, l);
      } else if (r.t == T::Dict) {
        if ((l.t == T::List && !l.is_tuple) || l.t == T::Dict) fail(e, std::string("unhashable type: ") + l.type_name());
        in = l.is_str() && r.get(l.s);
      } else if (r.t != T::Undefined) {
        fail(e, std::string("argument of type ") + r.type_name() + " is not iterable");
      }
      return Value::boolean(op == "in" ? in : !in);
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int c;
      if (l.is_num() && r.is_num()) {
        double a = l.as_double(), b = r.as_double();
        c = a < b ? -1 : a > b ? 1 : 0;
      } else if (l.is_str() && r.is_str()) {
        c = l.s.compare(r.s);
      } else {
        fail(e, std::string("'") + op + "' not supported between " + l.type_name() + " and " + r.type_name());
      }
      bool res = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
      return Value::boolean(res);
    }
    if (op == "+") {
      if (l.is_str() && r.is_str()) {
        check_text(e, l.s.size() + r.s.size());
        return Value::str(l.s + r.s);
      }
      if (l.t == T::List && r.t == T::List) {
        if (l.is_tuple != r.is_tuple)
          fail(e, std::string("can only concatenate ") + (l.is_tuple ? "tuple" : "list") + " (not " + (r.is_tuple ? "tuple" : "list") + ") to one");
        if (l.l->size() + r.l->size() > kMaxItems) fail(e, "a list of more than " + std::to_string(kMaxItems) + " items");
        List x = *l.l;
        x.insert(x.end(), r.l->begin(), r.l->end());
        Value out = Value::list(std::move(x));
        out.is_tuple = l.is_tuple;
        return out;
      }
    }
    if (op == "*" && ((l.is_str() && r.t == T::Int) || (r.is_str() && l.t == T::Int))) {
      const Value& s = l.is_str() ? l : r;
      int64_t n = l.is_str() ? r.i : l.i;
      if (n > 0 && !s.s.empty()) check_text(e, s.s.size() > kMaxText / size_t(n) ? kMaxText + 1 : s.s.size() * size_t(n));
      std::string o;
      for (int64_t k = 0; k < n; ++k) o += s.s;
      return Value::str(o);
    }
    if (l.is_num() && r.is_num()) {
      bool fl = l.t == T::Float || r.t == T::Float;
      double a = l.as_double(), b = r.as_double();
      int64_t x = ival(l), y = ival(r);
      // Python's integers are unbounded; ours are 64-bit, and overflow is an error, not a wrap.
      int64_t z = 0;
      auto checked = [&](bool overflow) {
        if (overflow) fail(e, "integer overflow in " + op + " (integers are 64-bit here)");
        return Value::integer(z);
      };
      if (op == "+") return fl ? Value::number(a + b) : checked(__builtin_add_overflow(x, y, &z));
      if (op == "-") return fl ? Value::number(a - b) : checked(__builtin_sub_overflow(x, y, &z));
      if (op == "*") return fl ? Value::number(a * b) : checked(__builtin_mul_overflow(x, y, &z));
      if (op == "/") {
        if (b == 0) fail(e, "division by zero");
        return Value::number(a / b);
      }
      if (op == "//" || op == "%") {
        if (b == 0) fail(e, "division by zero");
        if (fl) {  // CPython's float divmod: from fmod, so 1 // 0.1 is 9.0 (not floor(1 / 0.1) = 10.0)
          double mod = std::fmod(a, b), div = (a - mod) / b;
          if (mod != 0) {
            if ((b < 0) != (mod < 0)) mod += b, div -= 1;
          } else {
            mod = std::copysign(0.0, b);
          }
          double q = std::copysign(0.0, a / b);
          if (div != 0) {
            q = std::floor(div);
            if (div - q > 0.5) q += 1;
          }
          return op == "//" ? Value::number(q) : Value::number(mod);
        }
        if (x == INT64_MIN && y == -1) return checked(true);
        int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --q;  // Python floors
        if (op == "//") return Value::integer(q);
        int64_t qy = 0;
        if (__builtin_mul_overflow(q, y, &qy)) return checked(true);
        return checked(__builtin_sub_overflow(x, qy, &z));
      }
      if (op == "**") {
        if (fl || y < 0) return Value::number(std::pow(a, b));
        int64_t p = 1, base = x;  // by squaring, each step checked
        for (int64_t k = y; k > 0; k >>= 1) {
          if ((k & 1) && __builtin_mul_overflow(p, base, &p)) return checked(true);
          if (k > 1 && __builtin_mul_overflow(base, base, &base)) return checked(true);
        }
        z = p;
        return checked(false);
      }
    }
    fail(e, "unsupported operand types for " + op + ": " + l.type_name() + " and " + r.type_name());
  }

  std::string str_arg(const Expr& e, const Args& a, size_t i, const char* name, const char* what) {
    const Value* v = a.get(i, name);
    if (!v || !v->is_str()) fail(e, std::string(what) + ": expected a string argument");
    return v->s;
  }

  Value method(const Expr& e, const Value& o, const Args& a) {
    const std::string& m = e.name;
    if (o.t == T::Str) {
      const std::string& s = o.s;
      if (m == "startswith" || m == "endswith") {
        const Value* p = a.get(0, "prefix");
        if (!p) fail(e, m + "() needs an argument");
        std::vector<std::string> cands;
        if (p->is_str()) cands.push_back(p->s);
        else if (p->t == T::List) for (const auto& x : *p->l) cands.push_back(x.s);
        for (const auto& c : cands) {
          if (c.size() > s.size()) continue;
          if (m == "startswith" ? s.compare(0, c.size(), c) == 0 : s.compare(s.size() - c.size(), c.size(), c) == 0)
            return Value::boolean(true);
        }
        return Value::boolean(false);
      }
      if (m == "strip" || m == "lstrip" || m == "rstrip") {
        const Value* c = a.get(0, "chars");
        return Value::str(strip(s, c && c->is_str() ? &c->s : nullptr, m != "rstrip", m != "lstrip"));
      }
      if (m == "split") {
        const Value* sep = a.get(0, "sep");
        const Value* mx = a.get(1, "maxsplit");
        int64_t maxsplit = mx && mx->t == T::Int ? mx->i : -1;
        List parts;
        if (!sep || sep->t == T::None) {  // runs of whitespace (str.isspace), no empty parts
          // (byte offsets; each step decodes one code point)
          auto skip = [&](size_t i, bool space) {
            while (i < s.size()) {
              const auto u = utf8::unit_at(s, i);
              if (utf8::is_space(u.cp) != space) break;
              i += u.len;
            }
            return i;
          };
          size_t i = 0;
          while ((i = skip(i, true)) < s.size()) {
            if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) {
              parts.push_back(Value::str(strip(s.substr(i), nullptr, false, true)));
              break;
            }
            const size_t j = skip(i, false);
            parts.push_back(Value::str(s.substr(i, j - i)));
            i = j;
          }
        } else {
          if (!sep->is_str() || sep->s.empty()) fail(e, "split(): empty or non-string separator");
          size_t i = 0;
          for (;;) {
            size_t j = s.find(sep->s, i);
            if (j == std::string::npos || (maxsplit >= 0 && int64_t(parts.size()) == maxsplit)) {
              parts.push_back(Value::str(s.substr(i)));
              break;
            }
            parts.push_back(Value::str(s.substr(i, j - i)));
            i = j + sep->s.size();
          }
        }
        return Value::list(std::move(parts));
      }
      if (m == "upper") return Value::str(upper(s));
      if (m == "lower") return Value::str(lower(s));
      if (m == "capitalize") return Value::str(utf8::change_case(s, utf8::Case::Capitalize));
      if (m == "title") return Value::str(utf8::change_case(s, utf8::Case::Title));
      if (m == "replace") {
        std::string from = str_arg(e, a, 0, "old", "replace()"), to = str_arg(e, a, 1, "new", "replace()");
        const Value* cnt = a.get(2, "count");
        int64_t n = cnt && cnt->t == T::Int ? cnt->i : -1;
        std::string r;
        size_t i = 0;
        if (from.empty()) fail(e, "replace(): empty pattern is not supported");
        for (;;) {
          size_t j = s.find(from, i);
          if (j == std::string::npos || n == 0) { r += s.substr(i); break; }
          r += s.substr(i, j - i) + to;
          check_text(e, r.size());
          i = j + from.size();
          if (n > 0) --n;
        }
        return Value::str(r);
      }
      if (m == "find") {
        size_t j = s.find(str_arg(e, a, 0, "sub", "find()"));
        return Value::integer(j == std::string::npos ? -1 : int64_t(cp_count(std::string_view(s).substr(0, j))));
      }
      if (m == "count") {
        std::string sub = str_arg(e, a, 0, "sub", "count()");
        int64_t n = 0;
        for (size_t j = s.find(sub); !sub.empty() && j != std::string::npos; j = s.find(sub, j + sub.size())) ++n;
        return Value::integer(n);
      }
      if (m == "join") {
        const Value* it = a.get(0, "iterable");
        if (!it || it->t != T::List) fail(e, "join(): expected a list");
        std::string r;
        for (size_t k = 0; k < it->l->size(); ++k) {
          r += (k ? s : "") + (*it->l)[k].to_str();
          check_text(e, r.size());
        }
        return Value::str(r);
      }
    }
    if (o.t == T::Dict && !o.is_namespace) {
      if (m == "items") {
        List r;
        for (const auto& [k, v] : *o.d) {
          r.push_back(Value::list({Value::str(k), v}));
          r.back().is_tuple = true;
        }
        return Value::list(std::move(r));
      }
      if (m == "keys" || m == "values") {
        List r;
        for (const auto& [k, v] : *o.d) r.push_back(m == "keys" ? Value::str(k) : v);
        return Value::list(std::move(r));
      }
      if (m == "get") {
        const Value* k = a.get(0, "key");
        const Value* d = a.get(1, "default");
        const Value* v = k && k->is_str() ? o.get(k->s) : nullptr;
        return v ? *v : d ? *d : Value::none();
      }
    }
    fail(e, std::string("unsupported construct: method ") + o.type_name() + "." + m + "()");
  }

  Value call(const Expr& e, const Args& a) {
    const std::string& f = e.name;
    if (f == "namespace" || f == "dict") {
      Value ns = Value::dict();
      ns.is_namespace = f == "namespace";
      if (ns.is_namespace) namespaces_.push_back(ns.d);
      if (!a.pos.empty() && a.pos[0].t == T::Dict)
        for (const auto& [k, v] : *a.pos[0].d) ns.set(k, v);
      for (const auto& [k, v] : a.kw) ns.set(k, v);
      return ns;
    }
    if (f == "range") {
      int64_t s = 0, t = 0, st = 1;
      if (a.pos.size() == 1) t = ival(a.pos[0]);
      else if (a.pos.size() >= 2) { s = ival(a.pos[0]); t = ival(a.pos[1]); if (a.pos.size() > 2) st = ival(a.pos[2]); }
      if (st == 0) fail(e, "range() step must not be zero");
      const double count = st > 0 ? std::ceil((double(t) - double(s)) / double(st)) : std::ceil((double(s) - double(t)) / double(-st));
      if (count > double(kMaxItems)) fail(e, "range() of more than " + std::to_string(kMaxItems) + " items");
      List r;
      for (int64_t i = s; st > 0 ? i < t : i > t; i += st) r.push_back(Value::integer(i));
      return Value::list(std::move(r));
    }
    if (f == "raise_exception") {
      LMF_FAIL("chat template raised an exception: ", a.pos.empty() ? "" : a.pos[0].to_str());
    }
    if (f == "strftime_now") {
      std::string fmt = a.pos.empty() ? "" : a.pos[0].to_str();
      std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
      return Value::str(std::string(buf, n));
    }
    fail(e, "unsupported construct: function " + f + "()");
  }

  Value filter(const Expr& e, const Value& v, const Args& a) {
    const std::string& f = e.name;
    if (f == "length" || f == "count") {
      if (v.t == T::Str) return Value::integer(int64_t(cp_count(v.s)));
      if (v.t == T::List) return Value::integer(int64_t(v.l->size()));
      if (v.t == T::Dict) return Value::integer(int64_t(v.d->size()));
      if (v.t == T::Undefined) return Value::integer(0);
      fail(e, std::string("length of ") + v.type_name());
    }
    if (f == "trim") {
      const Value* c = a.get(0, "chars");
      return Value::str(strip(v.to_str(), c && c->is_str() ? &c->s : nullptr, true, true));
    }
    if (f == "tojson") {
      // transformers' own filter: tojson(x, ensure_ascii=False, indent=None, separators=None,
      // sort_keys=False), i.e. json.dumps with those options. indent: an int (bool included) is
      // that many spaces, 0 or negative none (newlines only), a string is the unit.
      static constexpr const char* kNames[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
      if (a.pos.size() > 4) fail(e, "tojson takes at most 4 arguments");
      for (const auto& [k, x] : a.kw)
        if (std::find(std::begin(kNames), std::end(kNames), k) == std::end(kNames)) fail(e, "tojson: unexpected argument " + k);
      JsonStyle js;
      if (const Value* x = a.get(0, kNames[0])) js.ascii = x->truthy();
      const Value* ind = a.get(1, kNames[1]);
      if (ind && ind->t != T::None && ind->t != T::Undefined) {
        if (ind->t == T::Str) {
          js.indent = ind->s;
        } else if (ind->t == T::Int || ind->t == T::Bool) {
          const int64_t n = ind->t == T::Bool ? int64_t(ind->b) : ind->i;
          check_text(e, n > 0 ? size_t(n) : 0);
          js.indent = std::string(n > 0 ? size_t(n) : 0, ' ');
        } else {
          fail(e, std::string("tojson indent of type ") + ind->type_name());
        }
        js.item_sep = ",";
      }
      const Value* sep = a.get(2, kNames[2]);
      if (sep && sep->t != T::None && sep->t != T::Undefined) {
        if (sep->t != T::List || sep->l->size() != 2 || !(*sep->l)[0].is_str() || !(*sep->l)[1].is_str())
          fail(e, "tojson separators: expected two strings");
        js.item_sep = (*sep->l)[0].s;
        js.key_sep = (*sep->l)[1].s;
      }
      if (const Value* x = a.get(3, kNames[3])) js.sort_keys = x->truthy();
      return Value::str(v.to_json(js));
    }
    if (f == "string") return Value::str(v.to_str());
    if (f == "upper") return Value::str(upper(v.to_str()));
    if (f == "lower") return Value::str(lower(v.to_str()));
    if (f == "safe" || f == "e" || f == "escape") {
      if (f != "safe") fail(e, "unsupported construct: filter " + f);
      return v;
    }
    if (f == "default" || f == "d") {
      const Value* dv = a.get(0, "default_value");
      const Value* b = a.get(1, "boolean");
      bool use = !v.defined() || (b && b->truthy() && !v.truthy());
      return use ? (dv ? *dv : Value::str("")) : v;
    }
    if (f == "first" || f == "last") {
      if (v.t == T::List) return v.l->empty() ? Value() : (f == "first" ? v.l->front() : v.l->back());
      if (v.t == T::Str) {
        if (v.s.empty()) return Value();
        if (f == "first") return Value::str(v.s.substr(0, utf8::unit_at(v.s, 0).len));
        const auto at = cp_starts(v.s);
        return Value::str(cp_at(v.s, at, at.size() - 2));
      }
      fail(e, std::string("filter ") + f + " on " + v.type_name());
    }
    if (f == "join") {
      const Value* sep = a.get(0, "d");
      std::string s = sep ? sep->to_str() : "";
      std::string r;
      // Jinja2 joins any iterable: a string's characters, a dict's keys; undefined is empty
      if (v.t != T::List && v.t != T::Str && v.t != T::Dict && v.t != T::Undefined) fail(e, std::string("join of ") + v.type_name());
      std::vector<Value> items;
      if (v.t == T::List) items = *v.l;
      if (v.t == T::Str) {
        const auto at = cp_starts(v.s);
        if (at.size() - 1 > kMaxItems) fail(e, "join over more than " + std::to_string(kMaxItems) + " characters");
        for (size_t k = 0; k + 1 < at.size(); ++k) items.push_back(Value::str(cp_at(v.s, at, k)));
      }
      if (v.t == T::Dict)
        for (const auto& kv : *v.d) items.push_back(Value::str(kv.first));
      for (size_t k = 0; k < items.size(); ++k) {
        r += (k ? s : "") + items[k].to_str();
        check_text(e, r.size());
      }
      return Value::str(r);
    }
    if (f == "list") {
      if (v.t == T::List) {  // a tuple's list is a list
        Value out = v;
        out.is_tuple = false;
        return out;
      }
      Node dummy;
      dummy.line = e.line;
      return Value::list(iterate(v, dummy));
    }
    if (f == "reverse") {
      if (v.t == T::Str) {
        const auto at = cp_starts(v.s);
        std::string r;
        r.reserve(v.s.size());
        for (size_t k = at.size() - 1; k-- > 0;) r += cp_at(v.s, at, k);
        return Value::str(r);
      }
      if (v.t == T::List) {
        List r(v.l->rbegin(), v.l->rend());
        return Value::list(std::move(r));
      }
      fail(e, std::string("reverse of ") + v.type_name());
    }
    if (f == "replace") return method(e, Value::str(v.to_str()), a);
    if (f == "capitalize") return method(e, Value::str(v.to_str()), a);
    if (f == "title") return Value::str(jinja_title(v.to_str()));
    if ((f == "int" || f == "float" || f == "abs") && v.t == T::Undefined) fail(e, f + " of an undefined value");
    if (f == "int" || f == "float") {
      // Jinja2: int(v), else int(float(v)), else the default (0); float(v), else the default (0.0).
      // A string must be the whole number, spaces around it allowed, as Python's int() and float().
      const Value* d = a.get(0, "default");
      if (f == "int") {
        const Value* base = a.get(1, "base");
        if (base && !(base->t == T::Int && base->i == 10)) fail(e, "unsupported construct: int filter with a base other than 10");
      }
      std::optional<double> x;
      if (v.is_num()) {
        if (f == "int" && v.t != T::Float) return Value::integer(ival(v));
        x = v.as_double();
      } else if (v.is_str()) {
        if (f == "int")
          if (auto n = py_number<int64_t>(v.s)) return Value::integer(*n);
        x = py_number<double>(v.s);
      }
      if (f == "float") return x ? Value::number(*x) : d ? *d : Value::number(0);
      if (!x || std::isnan(*x)) return d ? *d : Value::integer(0);
      if (!(std::fabs(*x) < 9.2e18)) fail(e, "int() of " + Value::number(*x).repr() + " does not fit 64 bits");
      return Value::integer(int64_t(*x));  // int() truncates
    }
    if (f == "abs") {
      if (!v.is_num()) fail(e, std::string("abs of ") + v.type_name());
      if (v.t == T::Float) return Value::number(std::fabs(v.f));
      return Value::integer(std::llabs(ival(v)));
    }
    if (f == "items") return method(e, v, a);
    if (f == "map" || f == "selectattr" || f == "rejectattr") {
      if (v.t != T::List && v.t != T::Undefined) fail(e, "filter " + f + " needs a list");
      List out;
      std::vector<Value> items = v.t == T::List ? *v.l : std::vector<Value>{};
      if (f == "map") {
        const Value* attr = a.get(99, "attribute");
        if (!attr) fail(e, "unsupported construct: map filter without attribute=");
        for (const auto& it : items) {
          const Value* x = it.get(attr->s);
          out.push_back(x ? *x : Value());
        }
      } else {
        if (a.pos.empty() || !a.pos[0].is_str()) fail(e, f + " needs an attribute name");
        for (const auto& it : items) {
          const Value* x = it.get(a.pos[0].s);
          Value xv = x ? *x : Value();
          bool ok;
          if (a.pos.size() == 1) {
            ok = xv.truthy();
          } else {
            Args ta;
            ta.pos.assign(a.pos.begin() + 2, a.pos.end());
            ok = named_test(e, a.pos[1].s, xv, ta);
          }
          if (ok == (f == "selectattr")) out.push_back(it);
        }
      }
      return Value::list(std::move(out));
    }
    fail(e, "unsupported construct: filter " + f);
  }

  bool test(const Expr& e, const Value& v, const Args& a) { return named_test(e, e.name, v, a); }

  bool named_test(const Expr& e, const std::string& t, const Value& v, const Args& a) {
    if (t == "defined") return v.defined();
    if (t == "undefined") return !v.defined();
    if (t == "none") return v.t == T::None;
    if (t == "string") return v.t == T::Str;
    if (t == "number") return v.is_num();  // Jinja2: isinstance(v, Number), bool included
    if (t == "integer") return v.t == T::Int;
    if (t == "float") return v.t == T::Float;
    if (t == "boolean") return v.t == T::Bool;
    if (t == "true") return v.t == T::Bool && v.b;
    if (t == "false") return v.t == T::Bool && !v.b;
    if (t == "mapping") return v.t == T::Dict;
    // (Jinja2's Undefined has a length and iterates as empty: both tests hold for it)
    if (t == "iterable") return v.t == T::List || v.t == T::Dict || v.t == T::Str || v.t == T::Undefined;
    if (t == "sequence") return v.t == T::List || v.t == T::Str || v.t == T::Dict || v.t == T::Undefined;
    if (t == "odd" || t == "even") {  // Jinja2: v % 2 == 1 / v % 2 == 0 (Python's modulo)
      if (!v.is_num()) fail(e, "test " + t + " of " + v.type_name());
      if (v.t == T::Float) {
        const double m = v.f - 2 * std::floor(v.f / 2);
        return t == "odd" ? m == 1 : m == 0;
      }
      const int64_t i = v.t == T::Bool ? int64_t(v.b) : v.i;
      return (i % 2 != 0) == (t == "odd");
    }
    // str(v).islower() / isupper(): at least one cased character, and none of the other case
    if (t == "lower" || t == "upper") {
      const std::string x = v.to_str(), lo = lower(x), up = upper(x);
      return t == "lower" ? lo == x && up != x : up == x && lo != x;
    }
    const Value* o = a.get(0, "other");
    if (t == "eq" || t == "equalto" || t == "==" || t == "ne" || t == "!=" || t == "sameas" || t == "in" ||
        t == "divisibleby") {
      if (!o) fail(e, "test " + t + " needs an argument");
      if (t == "ne" || t == "!=") return !equal(v, *o);
      if (t == "in") {
        if (o->t == T::List) { for (const auto& x : *o->l) if (equal(x, v)) return true; return false; }
        if (o->t == T::Str) return v.is_str() && o->s.find(v.s) != std::string::npos;
        if (o->t == T::Dict) return v.is_str() && o->get(v.s);
        return false;
      }
      if (t == "divisibleby") return ival(*o) != 0 && ival(v) % ival(*o) == 0;
      if (t == "sameas") return v.t == o->t && equal(v, *o);
      return equal(v, *o);
    }
    fail(e, "unsupported construct: test '" + t + "'");
  }
};

}  // namespace

namespace {
// Jinja2's lexer (as transformers sets it up: keep_trailing_newline off) reads "\r\n" and "\r"
// as "\n" everywhere in the source, string literals included, and drops one final newline.
std::string jinja_source(const std::string& source) {
  std::string s;
  s.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] != '\r') { s += source[i]; continue; }
    s += '\n';
    if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}
}  // namespace

Template::Template(const std::string& source) : prog_(std::make_shared<Program>(parse(jinja_source(source)))) {}
Template::~Template() = default;

std::string Template::render(const Value& ctx) const {
  Interp in(ctx);
  in.exec(prog_->body);
  return std::move(in.out_);
}

}  // namespace lmf::jinja
