// Parser for the Jinja subset. Whitespace handling follows the Environment that transformers
// renders chat templates with: trim_blocks=True, lstrip_blocks=True, plus the "-" / "+" tag
// modifiers.
#include <charconv>
#include <cstring>
#include <string>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/utf8.h"
#include "util/status.h"

namespace lmf::jinja {

namespace {

// A template comes from a model file, so it is untrusted input: these bound the parser's recursion
// (and the evaluator's, which walks the same trees) far above what any real chat template uses.
constexpr int kMaxNesting = 64;       // parentheses, lists, not/unary chains; blocks inside blocks
constexpr size_t kMaxTagTokens = 2048;  // tokens in one {{ }} or {% %} (bounds operator chains)

[[noreturn]] void fail(int line, const std::string& what) {
  LMF_FAIL("chat template line ", line, ": ", what);
}

// ---- template level: text, {{ expr }}, {% stmt %}; comments dropped --------------------------

struct Segment {
  enum class K { Text, Var, Block } k;
  std::string s;  // text, or the tag's inner source
  int line;
};

// Line numbers for positions that mostly move forward (one count from the start per tag was
// quadratic in the number of tags).
struct LineAt {
  const std::string& src;
  size_t pos = 0;
  int line = 1;
  int operator()(size_t p) {
    if (p < pos) pos = 0, line = 1;
    for (; pos < p && pos < src.size(); ++pos) line += src[pos] == '\n';
    return line;
  }
};

// End of a tag's inner part (index of the closing delimiter), skipping quoted strings.
size_t find_close(const std::string& src, size_t from, const char* close) {
  char q = 0;
  int depth = 0;  // brackets opened inside the tag: "{{ {'a': {}} }}" closes at the last "}}"
  for (size_t i = from; i + 1 < src.size(); ++i) {
    char c = src[i];
    if (q) {
      if (c == '\\') ++i;
      else if (c == q) q = 0;
    } else if (c == '\'' || c == '"') {
      q = c;
    } else if (depth == 0 && c == close[0] && src[i + 1] == close[1]) {
      return i;
    } else if (c == '{' || c == '[' || c == '(') {
      ++depth;
    } else if ((c == '}' || c == ']' || c == ')') && depth > 0) {
      --depth;
    }
  }
  return std::string::npos;
}

std::vector<Segment> scan(const std::string& src) {
  std::vector<Segment> out;
  LineAt line_at{src};
  size_t pos = 0;
  bool strip_next = false;  // previous tag ended with "-"
  bool trim_next = false;   // previous tag was a block/comment: drop one newline (trim_blocks)
  while (pos <= src.size()) {
    size_t start = pos;
    while ((start = src.find('{', start)) != std::string::npos) {
      if (start + 1 < src.size() && std::strchr("{%#", src[start + 1])) break;
      ++start;
    }
    size_t text_end = start == std::string::npos ? src.size() : start;
    std::string text = src.substr(pos, text_end - pos);
    char open = start == std::string::npos ? 0 : src[start + 1];
    char mod = (open && start + 2 < src.size()) ? src[start + 2] : 0;
    // Whitespace control before the tag.
    if (open && mod == '-') {
      size_t e = text.find_last_not_of(" \t\r\n\f\v");
      text.erase(e == std::string::npos ? 0 : e + 1);
    } else if (open && open != '{' && mod != '+') {  // lstrip_blocks
      size_t j = text_end;
      while (j > pos && (src[j - 1] == ' ' || src[j - 1] == '\t')) --j;
      bool at_line_start = j == 0 || src[j - 1] == '\n' ||
                           (j == pos && trim_next && pos > 0 && src[pos - 1] == '\n');
      if (at_line_start && j >= pos) text.erase(j - pos);
    }
    if (strip_next) {
      size_t b = text.find_first_not_of(" \t\r\n\f\v");
      text.erase(0, b == std::string::npos ? text.size() : b);
    } else if (trim_next && !text.empty() && text_end > pos) {
      if (text[0] == '\n') text.erase(0, 1);
      else if (text.compare(0, 2, "\r\n") == 0) text.erase(0, 2);
    }
    if (!text.empty()) out.push_back({Segment::K::Text, text, line_at(pos)});
    if (!open) break;

    const char* close = open == '{' ? "}}" : open == '%' ? "%}" : "#}";
    size_t inner = start + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
    size_t end = open == '#' ? src.find("#}", inner) : find_close(src, inner, close);
    int line = line_at(start);
    if (end == std::string::npos) fail(line, std::string("unclosed '{") + open + "'");
    size_t inner_end = end;
    char endmod = end > inner ? src[end - 1] : 0;
    if (endmod == '-' || endmod == '+') --inner_end;
    std::string body = src.substr(inner, inner_end - inner);
    strip_next = endmod == '-';
    trim_next = open != '{' && endmod != '+';
    pos = end + 2;
    if (open == '#') continue;
    // {% raw %}...{% endraw %}: copied verbatim.
    std::string trimmed = body;
    trimmed.erase(0, trimmed.find_first_not_of(" \t\r\n"));
    trimmed.erase(trimmed.find_last_not_of(" \t\r\n") + 1);
    if (open == '%' && trimmed == "raw") {
      size_t r = pos;
      size_t e;
      for (;;) {
        e = src.find("{%", r);
        if (e == std::string::npos) fail(line, "unclosed {% raw %}");
        size_t c = src.find("%}", e);
        if (c == std::string::npos) fail(line, "unclosed {% raw %}");
        std::string t = src.substr(e + 2, c - e - 2);
        if (!t.empty() && (t[0] == '-' || t[0] == '+')) t.erase(0, 1);
        if (!t.empty() && (t.back() == '-' || t.back() == '+')) t.pop_back();
        t.erase(0, t.find_first_not_of(" \t\r\n"));
        t.erase(t.find_last_not_of(" \t\r\n") + 1);
        if (t == "endraw") {
          std::string raw = src.substr(pos, e - pos);
          if (trim_next && !raw.empty() && raw[0] == '\n') raw.erase(0, 1);
          if (src[e + 2] == '-') raw.erase(raw.find_last_not_of(" \t\r\n\f\v") + 1);
          if (!raw.empty()) out.push_back({Segment::K::Text, raw, line});
          strip_next = src[c - 1] == '-';
          trim_next = src[c - 1] != '+';
          pos = c + 2;
          break;
        }
        r = e + 2;
      }
      continue;
    }
    out.push_back({open == '{' ? Segment::K::Var : Segment::K::Block, body, line});
  }
  return out;
}

// ---- expression tokens ----------------------------------------------------------------------

struct Tok {
  enum class K { Name, Str, Int, Float, Op, End } k;
  std::string s;
  int64_t i = 0;
  double f = 0;
};

std::string unescape(const std::string& s, int line) {
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) { o += s[i]; continue; }
    char c = s[++i];
    switch (c) {
      case 'n': o += '\n'; break;
      case 't': o += '\t'; break;
      case 'r': o += '\r'; break;
      case '0': o += '\0'; break;
      case '\\': o += '\\'; break;
      case '\'': o += '\''; break;
      case '"': o += '"'; break;
      case '\n': break;
      case 'x': case 'u': case 'U': {
        size_t n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        uint32_t cp = 0;
        const char* first = s.data() + i + 1;
        const auto r = i + n < s.size() ? std::from_chars(first, first + n, cp, 16) : std::from_chars_result{first, std::errc::invalid_argument};
        if (r.ec != std::errc() || r.ptr != first + n || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
          fail(line, "bad \\" + std::string(1, c) + " escape (expected " + std::to_string(n) + " hex digits of a code point)");
        utf8::append(o, cp);
        i += n;
        break;
      }
      default: o += '\\'; o += c;
    }
  }
  return o;
}

std::vector<Tok> lex(const std::string& s, int line) {
  std::vector<Tok> t;
  size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') { ++i; continue; }
    if (std::isalpha(uint8_t(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(uint8_t(s[j])) || s[j] == '_')) ++j;
      t.push_back({Tok::K::Name, s.substr(i, j - i)});
      i = j;
    } else if (std::isdigit(uint8_t(c))) {
      size_t j = i;
      bool fl = false;
      while (j < s.size() && (std::isdigit(uint8_t(s[j])) || s[j] == '_' ||
                              (s[j] == '.' && !fl && j + 1 < s.size() && std::isdigit(uint8_t(s[j + 1]))))) {
        fl = fl || s[j] == '.';
        ++j;
      }
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {  // exponent: 1e3, 2.5E-2
        size_t k = j + 1;
        if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < s.size() && std::isdigit(uint8_t(s[k]))) {
          while (k < s.size() && std::isdigit(uint8_t(s[k]))) ++k;
          j = k;
          fl = true;
        }
      }
      std::string num;
      for (size_t k = i; k < j; ++k) if (s[k] != '_') num += s[k];
      Tok tk{fl ? Tok::K::Float : Tok::K::Int, num};
      const char* end = num.data() + num.size();
      const auto r = fl ? std::from_chars(num.data(), end, tk.f) : std::from_chars(num.data(), end, tk.i);
      if (r.ec != std::errc() || r.ptr != end) fail(line, "number '" + num + "' out of range");
      t.push_back(tk);
      i = j;
    } else if (c == '\'' || c == '"') {
      size_t j = i + 1;
      while (j < s.size() && s[j] != c) j += s[j] == '\\' ? 2 : 1;
      if (j >= s.size()) fail(line, "unterminated string");
      t.push_back({Tok::K::Str, unescape(s.substr(i + 1, j - i - 1), line)});
      i = j + 1;
    } else {
      static const char* two[] = {"//", "**", "==", "!=", "<=", ">="};
      std::string op(1, c);
      for (const char* o : two)
        if (s.compare(i, 2, o) == 0) op = o;
      if (op.size() == 1 && !std::strchr("+-*/%~<>=()[]{}.,:|!", c))
        fail(line, std::string("unexpected character '") + c + "'");
      t.push_back({Tok::K::Op, op});
      i += op.size();
    }
  }
  if (t.size() > kMaxTagTokens) fail(line, "a tag of more than " + std::to_string(kMaxTagTokens) + " tokens");
  t.push_back({Tok::K::End, ""});
  return t;
}

// ---- expression parser (Jinja2's precedence) --------------------------------------------------

class ExprParser {
 public:
  ExprParser(std::vector<Tok> t, int line) : t_(std::move(t)), line_(line) {}

  bool at_end() const { return t_[p_].k == Tok::K::End; }
  bool is_op(const char* s) const { return t_[p_].k == Tok::K::Op && t_[p_].s == s; }
  bool is_name(const char* s) const { return t_[p_].k == Tok::K::Name && t_[p_].s == s; }
  bool is_name_at(size_t off, const char* s) const {
    return p_ + off < t_.size() && t_[p_ + off].k == Tok::K::Name && t_[p_ + off].s == s;
  }
  void expect_op(const char* s) {
    if (!is_op(s)) fail(line_, std::string("expected '") + s + "', got '" + t_[p_].s + "'");
    ++p_;
  }
  std::string name() {
    if (t_[p_].k != Tok::K::Name) fail(line_, "expected a name, got '" + t_[p_].s + "'");
    return t_[p_++].s;
  }
  void expect_end() {
    if (!at_end()) fail(line_, "unexpected '" + t_[p_].s + "'");
  }

  // Counts the recursion of expr() (every bracket, argument and subscript passes it once) and of
  // not_() and unary() into themselves ("not not x", "- -x").
  struct Nest {
    explicit Nest(ExprParser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting)
        fail(p_.line_, "expression nested deeper than " + std::to_string(kMaxNesting) + " levels");
    }
    ~Nest() { --p_.depth_; }
    ExprParser& p_;
  };

  ExprP expr() {  // ternary
    Nest nest(*this);
    ExprP e = or_();
    while (is_name("if")) {
      ++p_;
      auto n = mk(Expr::K::Ternary);
      n->a.push_back(std::move(e));
      n->a.push_back(or_());
      if (is_name("else")) {
        ++p_;
        n->a.push_back(expr());
      } else {
        n->a.push_back(nullptr);
      }
      e = std::move(n);
    }
    return e;
  }

  ExprP mk(Expr::K k) {
    auto e = std::make_unique<Expr>();
    e->k = k;
    e->line = line_;
    return e;
  }
  ExprP bin(std::string op, ExprP l, ExprP r) {
    auto n = mk(Expr::K::Binary);
    n->name = std::move(op);
    n->a.push_back(std::move(l));
    n->a.push_back(std::move(r));
    return n;
  }

  ExprP or_() {
    ExprP e = and_();
    while (is_name("or")) { ++p_; e = bin("or", std::move(e), and_()); }
    return e;
  }
  ExprP and_() {
    ExprP e = not_();
    while (is_name("and")) { ++p_; e = bin("and", std::move(e), not_()); }
    return e;
  }
  ExprP not_() {
    if (is_name("not")) {
      Nest nest(*this);
      ++p_;
      auto n = mk(Expr::K::Unary);
      n->name = "not";
      n->a.push_back(not_());
      return n;
    }
    return compare();
  }
  ExprP compare() {
    ExprP e = math1();
    for (;;) {
      static const char* ops[] = {"==", "!=", "<", ">", "<=", ">="};
      bool done = true;
      for (const char* o : ops)
        if (is_op(o)) { ++p_; e = bin(o, std::move(e), math1()); done = false; break; }
      if (!done) continue;
      if (is_name("in")) { ++p_; e = bin("in", std::move(e), math1()); continue; }
      if (is_name("not") && is_name_at(1, "in")) { p_ += 2; e = bin("not in", std::move(e), math1()); continue; }
      break;
    }
    return e;
  }
  ExprP math1() {
    ExprP e = concat();
    while (is_op("+") || is_op("-")) {
      std::string op = t_[p_++].s;
      e = bin(op, std::move(e), concat());
    }
    return e;
  }
  ExprP concat() {
    ExprP e = math2();
    while (is_op("~")) { ++p_; e = bin("~", std::move(e), math2()); }
    return e;
  }
  ExprP math2() {
    ExprP e = pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = t_[p_++].s;
      e = bin(op, std::move(e), pow());
    }
    return e;
  }
  ExprP pow() {
    ExprP e = unary(true);
    while (is_op("**")) { ++p_; e = bin("**", std::move(e), unary(true)); }
    return e;
  }
  ExprP unary(bool with_filter) {
    ExprP e;
    if (is_op("-") || is_op("+")) {
      Nest nest(*this);
      std::string op = t_[p_++].s;
      e = mk(Expr::K::Unary);
      e->name = op;
      e->a.push_back(unary(false));
    } else {
      e = postfix(primary());
    }
    if (with_filter) e = filters(std::move(e));
    return e;
  }

  void call_args(Expr& n) {  // after '('
    while (!is_op(")")) {
      if (t_[p_].k == Tok::K::Name && p_ + 1 < t_.size() && t_[p_ + 1].k == Tok::K::Op && t_[p_ + 1].s == "=") {
        std::string k = t_[p_].s;
        p_ += 2;
        n.kwargs.emplace_back(k, expr());
      } else {
        n.a.push_back(expr());
      }
      if (!is_op(",")) break;
      ++p_;
    }
    expect_op(")");
  }

  ExprP primary() {
    const Tok& tk = t_[p_];
    if (tk.k == Tok::K::Str) {
      auto e = mk(Expr::K::Lit);
      std::string s;
      while (t_[p_].k == Tok::K::Str) s += t_[p_++].s;  // adjacent literals concatenate
      e->lit = Value::str(s);
      return e;
    }
    if (tk.k == Tok::K::Int || tk.k == Tok::K::Float) {
      auto e = mk(Expr::K::Lit);
      e->lit = tk.k == Tok::K::Int ? Value::integer(tk.i) : Value::number(tk.f);
      ++p_;
      return e;
    }
    if (tk.k == Tok::K::Name) {
      ++p_;
      auto e = mk(Expr::K::Lit);
      if (tk.s == "true" || tk.s == "True") { e->lit = Value::boolean(true); return e; }
      if (tk.s == "false" || tk.s == "False") { e->lit = Value::boolean(false); return e; }
      if (tk.s == "none" || tk.s == "None") { e->lit = Value::none(); return e; }
      e->k = Expr::K::Name;
      e->name = tk.s;
      return e;
    }
    if (is_op("(")) {
      ++p_;
      ExprP e = expr();
      if (is_op(",")) {  // tuple: treated as a list
        auto l = mk(Expr::K::ListLit);
        l->name = "tuple";
        l->a.push_back(std::move(e));
        while (is_op(",")) {
          ++p_;
          if (is_op(")")) break;
          l->a.push_back(expr());
        }
        e = std::move(l);
      }
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      ++p_;
      auto l = mk(Expr::K::ListLit);
      while (!is_op("]")) {
        l->a.push_back(expr());
        if (!is_op(",")) break;
        ++p_;
      }
      expect_op("]");
      return l;
    }
    if (is_op("{")) {
      ++p_;
      auto d = mk(Expr::K::DictLit);
      while (!is_op("}")) {
        d->a.push_back(expr());
        expect_op(":");
        d->a.push_back(expr());
        if (!is_op(",")) break;
        ++p_;
      }
      expect_op("}");
      return d;
    }
    fail(line_, "unexpected '" + tk.s + "' in expression");
  }

  ExprP postfix(ExprP e) {
    for (;;) {
      if (is_op(".")) {
        ++p_;
        std::string n = name();
        if (is_op("(")) {
          ++p_;
          auto c = mk(Expr::K::Call);
          c->method = true;
          c->name = n;
          c->a.push_back(std::move(e));
          call_args(*c);
          e = std::move(c);
        } else {
          auto a = mk(Expr::K::Attr);
          a->name = n;
          a->a.push_back(std::move(e));
          e = std::move(a);
        }
      } else if (is_op("[")) {
        ++p_;
        ExprP parts[3];
        int n = 0;
        bool slice = false;
        for (;;) {
          if (!is_op(":") && !is_op("]")) parts[n] = expr();
          if (is_op(":") && n < 2) { ++p_; ++n; slice = true; continue; }
          break;
        }
        expect_op("]");
        if (!slice && !parts[0]) fail(line_, "empty subscript []");
        auto x = mk(slice ? Expr::K::Slice : Expr::K::Index);
        x->a.push_back(std::move(e));
        x->a.push_back(std::move(parts[0]));
        if (slice) {
          x->a.push_back(std::move(parts[1]));
          x->a.push_back(std::move(parts[2]));
        }
        e = std::move(x);
      } else if (is_op("(")) {
        if (e->k != Expr::K::Name) fail(line_, "only named functions can be called");
        ++p_;
        auto c = mk(Expr::K::Call);
        c->name = e->name;
        call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprP filters(ExprP e) {
    for (;;) {
      if (is_op("|")) {
        ++p_;
        auto f = mk(Expr::K::Filter);
        f->name = name();
        f->a.push_back(std::move(e));
        if (is_op("(")) { ++p_; call_args(*f); }
        e = std::move(f);
      } else if (is_name("is")) {
        ++p_;
        auto t = mk(Expr::K::Test);
        if (is_name("not")) { ++p_; t->negate = true; }
        // Test names may be keywords (none, true, false).
        t->name = name();
        t->a.push_back(std::move(e));
        if (is_op("(")) {
          ++p_;
          call_args(*t);
        } else if (t_[p_].k == Tok::K::Str || t_[p_].k == Tok::K::Int || t_[p_].k == Tok::K::Float ||
                   (t_[p_].k == Tok::K::Name && !is_name("and") && !is_name("or") && !is_name("if") &&
                    !is_name("else") && !is_name("in") && !is_name("not") && !is_name("is"))) {
          t->a.push_back(primary());  // "is sameas false", "is divisibleby 3"
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  std::vector<Tok> t_;
  size_t p_ = 0;
  int line_;
  int depth_ = 0;
};

// ---- statements -------------------------------------------------------------------------------

class StmtParser {
 public:
  explicit StmtParser(std::vector<Segment> segs) : s_(std::move(segs)) {}

  // Parses nodes until a block tag whose first word is in `stops`; returns that word ("" at end).
  std::string block(std::vector<Node>& out, std::initializer_list<const char*> stops) {
    if (++depth_ > kMaxNesting)
      fail(s_[i_ - 1].line, "blocks nested deeper than " + std::to_string(kMaxNesting) + " levels");
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    while (i_ < s_.size()) {
      const Segment& seg = s_[i_];
      if (seg.k == Segment::K::Text) {
        Node n;
        n.k = Node::K::Text;
        n.text = seg.s;
        out.push_back(std::move(n));
        ++i_;
        continue;
      }
      ExprParser p(lex(seg.s, seg.line), seg.line);
      if (seg.k == Segment::K::Var) {
        Node n;
        n.k = Node::K::Output;
        n.line = seg.line;
        n.expr = p.expr();
        p.expect_end();
        out.push_back(std::move(n));
        ++i_;
        continue;
      }
      std::string kw = p.name();
      for (const char* st : stops)
        if (kw == st) return kw;
      ++i_;
      Node n;
      n.line = seg.line;
      if (kw == "if") {
        n.k = Node::K::If;
        ExprP cond = p.expr();
        p.expect_end();
        for (;;) {
          std::vector<Node> body;
          std::string stop = block(body, {"elif", "else", "endif"});
          n.branches.emplace_back(std::move(cond), std::move(body));
          if (stop.empty()) fail(seg.line, "{% if %} without {% endif %}");
          ExprParser q(lex(s_[i_].s, s_[i_].line), s_[i_].line);
          q.name();
          ++i_;
          if (stop == "endif") break;
          if (stop == "elif") {
            cond = q.expr();
          } else {
            cond = nullptr;
            std::vector<Node> eb;
            if (block(eb, {"endif"}).empty()) fail(seg.line, "{% if %} without {% endif %}");
            ++i_;
            n.branches.emplace_back(nullptr, std::move(eb));
            break;
          }
        }
      } else if (kw == "for") {
        n.k = Node::K::For;
        n.targets.push_back(p.name());
        while (p.is_op(",")) { ++p.p_; n.targets.push_back(p.name()); }
        if (!p.is_name("in")) fail(seg.line, "expected 'in' in {% for %}");
        ++p.p_;
        n.expr = p.or_();  // not expr(): a trailing "if" filters items
        if (p.is_name("if")) { ++p.p_; n.cond = p.expr(); }
        if (p.is_name("recursive")) fail(seg.line, "unsupported construct: recursive for loop");
        p.expect_end();
        std::string stop = block(n.body, {"else", "endfor"});
        if (stop.empty()) fail(seg.line, "{% for %} without {% endfor %}");
        ++i_;
        if (stop == "else") {
          if (block(n.else_body, {"endfor"}).empty()) fail(seg.line, "{% for %} without {% endfor %}");
          ++i_;
        }
      } else if (kw == "set") {
        n.k = Node::K::Set;
        n.targets.push_back(p.name());
        if (p.is_op(".")) { ++p.p_; n.targets.push_back(p.name()); }
        if (p.is_op(",")) fail(seg.line, "unsupported construct: tuple assignment in {% set %}");
        if (!p.is_op("=")) fail(seg.line, "unsupported construct: {% set %} block (expected '=')");
        ++p.p_;
        n.expr = p.expr();
        p.expect_end();
      } else if (kw == "break" || kw == "continue") {
        n.k = kw == "break" ? Node::K::Break : Node::K::Continue;
      } else if (kw == "generation") {  // transformers' assistant-mask marker: renders its body
        std::vector<Node> body;
        if (block(body, {"endgeneration"}).empty()) fail(seg.line, "{% generation %} without end");
        ++i_;
        for (auto& b : body) out.push_back(std::move(b));
        continue;
      } else {
        fail(seg.line, "unsupported construct: {% " + kw + " %}");
      }
      out.push_back(std::move(n));
    }
    return "";
  }

 private:
  std::vector<Segment> s_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Program parse(const std::string& src) {
  StmtParser sp(scan(src));
  Program prog;
  std::string stop = sp.block(prog.body, {"endif", "endfor", "elif", "else", "endset", "endmacro",
                                          "endgeneration", "endraw"});
  if (!stop.empty()) LMF_FAIL("chat template: unexpected {% ", stop, " %}");
  return prog;
}

}  // namespace lmf::jinja
