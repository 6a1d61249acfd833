// Internal: syntax tree of the Jinja subset (parsed by jinja_parse.cpp, run by jinja_eval.cpp).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace lmf::jinja {

struct Expr {
  enum class K {
    Lit,      // lit
    Name,     // name
    Attr,     // a[0].name
    Index,    // a[0][a[1]]
    Slice,    // a[0][a[1]:a[2]:a[3]] (null parts omitted)
    Call,     // name(args) for globals; a[0].name(args) when method (then a[0] is the object)
    Filter,   // a[0] | name(args)
    Test,     // a[0] is [not] name(args)
    Unary,    // name in {"not", "-", "+"}; a[0]
    Binary,   // a[0] name a[1]; name is the operator ("and", "or", "in", "not in", "+", ...)
    Ternary,  // a[0] if a[1] else a[2] (a[2] may be null)
    ListLit,  // [a...]
    DictLit,  // {a[0]: a[1], a[2]: a[3], ...}
  };
  K k = K::Lit;
  Value lit;
  std::string name;
  std::vector<std::unique_ptr<Expr>> a;  // operands; for calls/filters/tests: positional args
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
  bool method = false;  // Call: a[0] is the object
  bool negate = false;  // Test: "is not"
  int line = 0;
};
using ExprP = std::unique_ptr<Expr>;

struct Node {
  enum class K { Text, Output, If, For, Set, Break, Continue };
  K k = K::Text;
  std::string text;
  ExprP expr;                                      // Output value, Set value, For iterable
  std::vector<std::pair<ExprP, std::vector<Node>>> branches;  // If: (cond, body); null cond = else
  std::vector<std::string> targets;  // For: loop variables; Set: {name} or {namespace, attr}
  ExprP cond;                        // For: "for x in xs if cond"
  std::vector<Node> body, else_body;  // For
  int line = 0;
};

struct Program {
  std::vector<Node> body;
};

// Throws lmf::Error "chat template line N: ..." naming the construct it does not support.
Program parse(const std::string& src);

}  // namespace lmf::jinja
