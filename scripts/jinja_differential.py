#!/usr/bin/env python3
"""Differential test of the chat-template interpreter against transformers' Jinja environment.

Generates random templates (expressions over strings with Unicode and whitespace, numbers, lists,
tuples, dicts and undefined names, through filters, methods, operators and tests; and statements:
if / for with loop variables / set / namespace / comments / raw, with whitespace control), renders
each with transformers' `_compile_jinja_template` (the reference) and with lmfuse (the
`jinja_render` tool of the test build), and reports every *silent mismatch*: lmfuse renders text
that differs from the reference's, or renders where the reference raises. lmfuse refusing what the
reference renders is counted, not reported (a named error is allowed: "a template lmfuse cannot
render gives a clear error"). Exits 1 on any silent mismatch.

    pip install transformers jinja2          # no torch needed
    cmake --build build --target jinja_render
    python3 scripts/jinja_differential.py [--seed 1] [-n 2000] [--render build/tests/jinja_render]
"""
import argparse, os, random, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STRS = ["''", "'a'", "'Ab c'", "' x '", "'\u00e9t\u00e9'", "'\u00a0y\u3000'", "'a,b,,c'", "'x\\ny'",
        "'\u4e2d\u6587'", "'\U0001F600'", "'42'", "'3.5'", "'\u00df'", "'they\\'re'", "'\\t'", "'1e3'"]
NUMS = ["0", "1", "-3", "7", "2.5", "-0.5", "1e16", "0.1", "100"]
FILTERS = ["trim", "upper", "lower", "title", "capitalize", "length", "first", "last", "join", "join(', ')",
           "tojson", "tojson(indent=2)", "tojson(sort_keys=true)", "default('d')", "int", "float", "string",
           "abs", "list", "reverse | list"]
METHODS = ["strip()", "split()", "split(',')", "upper()", "lower()", "startswith('a')", "endswith('c')",
           "replace('a', 'b')", "lstrip()", "rstrip('y')", "title()", "get('a')", "items() | list",
           "keys() | list", "values() | list", "capitalize()"]
OPS = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">", "in", "not in", "and", "or"]
TESTS = ["defined", "none", "string", "number", "mapping", "iterable", "sequence", "lower", "upper", "odd",
         "even", "true", "false", "boolean", "integer", "float"]
TEXT = ["", "a", " ", "\n", "  \n  ", "x\n", "\n\n", " b "]
LOOPS = ["[1, 2, 3]", "'ab'", "{'k': 1, 'j': 2}", "[]", "range(3)", "[[1, 2], [3, 4]]"]
LOOP_BODIES = ["{{ v }}", "{{ loop.index }}", "{{ loop.first }}{{ loop.last }}", "{{ loop.revindex0 }}",
               "{% if loop.last %}L{% endif %}", "{{ loop.length }}"]


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def lit(self, d):
        c, x = self.r.choice, self.r.random()
        if x < 0.25: return c(STRS)
        if x < 0.4: return c(NUMS)
        if x < 0.5: return c(["none", "true", "false"])
        if d > 2: return "1"
        n = self.r.randint
        if x < 0.65: return "[" + ", ".join(self.expr(d + 1) for _ in range(n(0, 3))) + "]"
        if x < 0.72: return "(" + ", ".join(self.expr(d + 1) for _ in range(n(1, 3))) + ",)"
        if x < 0.85: return "{" + ", ".join(f"{c(STRS[1:4])}: {self.expr(d + 1)}" for _ in range(n(0, 3))) + "}"
        return "x"  # undefined

    def expr(self, d=0):
        c, x = self.r.choice, self.r.random()
        if d > 3 or x < 0.35: return self.lit(d)
        if x < 0.55: return f"({self.expr(d + 1)}) | {c(FILTERS)}"
        if x < 0.7: return f"({self.expr(d + 1)}).{c(METHODS)}"
        if x < 0.85: return f"({self.expr(d + 1)}) {c(OPS)} ({self.expr(d + 1)})"
        if x < 0.92: return f"({self.expr(d + 1)}) is {c(TESTS)}"
        return "(" + self.expr(d + 1) + ")[" + c(["0", "-1", "1:", ":2", "'a'"]) + "]"

    def ws(self):
        return self.r.choice(["", "-"])

    def tag(self, inner):
        return "{%" + self.ws() + " " + inner + " " + self.ws() + "%}"

    def stmt(self, d=0):
        c, x = self.r.choice, self.r.random()
        if d > 2 or x < 0.3:
            return c(TEXT) + "{{" + self.ws() + " " + self.expr(2) + " " + self.ws() + "}}" + c(TEXT)
        if x < 0.45:
            return (self.tag("if " + self.expr(2)) + self.body(d) + self.tag("else") + self.body(d) +
                    self.tag("endif"))
        if x < 0.6:
            return self.tag("for v in " + c(LOOPS)) + c(LOOP_BODIES) + self.body(d) + self.tag("endfor")
        if x < 0.7: return "{% set y = " + self.expr(2) + " %}" + c(TEXT) + "{{ y }}"
        if x < 0.8:
            return ("{% set ns = namespace(c=0) %}{% for i in range(3) %}{% set ns.c = ns.c + i %}"
                    "{% endfor %}{{ ns.c }}" + c(TEXT))
        if x < 0.9: return c(TEXT) + "{#" + self.ws() + " c " + self.ws() + "#}" + c(TEXT)
        return self.tag("raw") + "{{ raw }}" + self.tag("endraw")

    def body(self, d):
        return "".join(self.stmt(d + 1) for _ in range(self.r.randint(0, 2)))

    def template(self):
        if self.r.random() < 0.5: return "{{ " + self.expr() + " }}"
        return self.body(0) + self.stmt(0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("--render", default=os.path.join(ROOT, "build", "tests", "jinja_render"))
    a = ap.parse_args()
    from transformers.utils.chat_template_utils import _compile_jinja_template
    g = Gen(a.seed)
    temps = [g.template() for _ in range(a.n)]
    ref = []
    for t in temps:
        try:
            ref.append((True, _compile_jinja_template(t).render()))
        except Exception as e:  # the reference raises: lmfuse must refuse too
            ref.append((False, f"{type(e).__name__}: {e}"))
    out = subprocess.run([a.render], input="\0".join(temps).encode() + b"\0", capture_output=True, check=True).stdout
    got = out.decode("utf-8", "surrogateescape").split("\0")[:-1]
    assert len(got) == len(temps), (len(got), len(temps))
    same = refused = silent = 0
    for t, (ok, want), g_ in zip(temps, ref, got):
        status, _, text = g_.partition("\n")
        if (ok and status == "ok" and text == want) or (not ok and status == "error"):
            same += 1
        elif ok and status == "error":
            refused += 1
        else:
            silent += 1
            print(f"MISMATCH {t!r}\n  transformers: {want!r}\n  lmfuse:       {status} {text!r}")
    print(f"{a.n} templates (seed {a.seed}): {same} agree, {refused} refused by lmfuse (named error), "
          f"{silent} silent mismatches")
    return 1 if silent else 0


if __name__ == "__main__":
    sys.exit(main())
