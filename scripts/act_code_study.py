#!/usr/bin/env python3
"""How the activation codes of the decode GEMVs move a real model's logits, by emulation in numpy.

A float reference forward of a Llama-architecture GGUF (SmolLM2-135M-Instruct Q4_1 by default:
scripts/get-demo-model.sh) on its dequantized weights, with an fp16 KV cache, in which the input
vector of every matmul can be rounded to an activation code first, the way the CPU and CUDA
backends quantize x (per block of B elements: amax = max|x|, d = amax / qmax, q = rne(x / d)).
Each variant's logits over a 64-token sequence (the reference prompt and 59 greedy tokens of the
float forward) are compared with the float forward's; position 4 (the prompt's last) is also
compared with transformers' logits in tests/data/real/smollm2_ref.json, which validates the
forward (float: ~1e-3, the level of the CPU's 16-bit path). docs/PERF.md, session 45.

  python3 scripts/act_code_study.py [--model models/smollm2-135m-instruct-q4_1.gguf]
"""
import argparse, os

import numpy as np
import gguf
from gguf.quants import dequantize

from check_real_logits import load_ref  # the transformers reference (scripts/make_real_refs.py)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MATMULS = ("qkv", "o", "gateup", "down", "head")


def load(path):
    r = gguf.GGUFReader(path)
    f = lambda k: r.fields[k].parts[r.fields[k].data[0]][0]
    w = {t.name: dequantize(t.data, t.tensor_type).astype(np.float32) for t in r.tensors}
    cfg = dict(n_embd=int(f("llama.embedding_length")), n_head=int(f("llama.attention.head_count")),
               n_kv=int(f("llama.attention.head_count_kv")), n_layer=int(f("llama.block_count")),
               eps=float(f("llama.attention.layer_norm_rms_epsilon")), base=float(f("llama.rope.freq_base")))
    if "output.weight" not in w:
        w["output.weight"] = w["token_embd.weight"]
    return w, cfg


def codes(x, bits, block=32):
    """x rounded to `bits`-bit codes per block of `block` elements (the backends' rule)."""
    qmax = 2 ** (bits - 1) - 1
    s = x.reshape(-1, block)
    am = np.abs(s).max(1, keepdims=True)
    d = np.where(am > 0, am / qmax, 1.0).astype(np.float32)
    return (np.rint(s / d) * d).reshape(x.shape).astype(np.float32)


def variant(bits=None, block=32, only=None, promote=None, stats=None):
    """The rounding applied to a matmul's input rows: `bits`-bit codes (None: float); `only`: the
    matmul kinds rounded (others float); `promote`: a block whose amax exceeds promote x the
    vector's median block amax takes 16-bit codes instead (the fraction promoted goes to stats)."""
    def aq(x, kind):
        if bits is None or (only is not None and kind not in only):
            return x
        y = codes(x, bits, block)
        if promote is not None:
            am = np.abs(x.reshape(x.shape[0], -1, 32)).max(2)
            flag = am > promote * np.median(am, axis=1, keepdims=True)
            stats.setdefault(kind, []).append(flag.mean())
            y = np.where(np.repeat(flag, 32, axis=1), codes(x, 16), y)
        return y
    return aq


def forward(w, c, tokens, aq):
    T, H, NH, NKV = len(tokens), c["n_embd"], c["n_head"], c["n_kv"]
    HD = H // NH
    rms = lambda x, g: x / np.sqrt(np.mean(x.astype(np.float64) ** 2, -1, keepdims=True) + c["eps"]).astype(np.float32) * g
    ang = np.arange(T)[:, None] * c["base"] ** (-np.arange(0, HD, 2) / HD)[None]
    cos, sin = np.cos(ang).astype(np.float32)[:, None], np.sin(ang).astype(np.float32)[:, None]

    def rope(v):  # GGUF's llama q/k rows are in the interleaved (pairwise) order
        o = np.empty_like(v)
        o[..., 0::2] = v[..., 0::2] * cos - v[..., 1::2] * sin
        o[..., 1::2] = v[..., 0::2] * sin + v[..., 1::2] * cos
        return o
    mask = np.triu(np.full((T, T), -np.inf, np.float32), 1)
    mm = lambda x, name, kind: aq(x, kind) @ w[name].reshape(-1, x.shape[1]).T
    x = w["token_embd.weight"].reshape(-1, H)[tokens]
    for l in range(c["n_layer"]):
        p = f"blk.{l}."
        h = rms(x, w[p + "attn_norm.weight"])
        q = rope(mm(h, p + "attn_q.weight", "qkv").reshape(T, NH, HD))
        k = rope(mm(h, p + "attn_k.weight", "qkv").reshape(T, NKV, HD)).astype(np.float16).astype(np.float32)
        v = mm(h, p + "attn_v.weight", "qkv").reshape(T, NKV, HD).astype(np.float16).astype(np.float32)
        k, v = np.repeat(k, NH // NKV, 1), np.repeat(v, NH // NKV, 1)
        a = np.einsum("thd,shd->hts", q, k) / np.sqrt(HD) + mask
        a = np.exp(a - a.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        x = x + mm(np.einsum("hts,shd->thd", a, v).reshape(T, H), p + "attn_output.weight", "o")
        h = rms(x, w[p + "ffn_norm.weight"])
        g, u = mm(h, p + "ffn_gate.weight", "gateup"), mm(h, p + "ffn_up.weight", "gateup")
        x = x + mm(g / (1 + np.exp(-g)) * u, p + "ffn_down.weight", "down")
    return mm(rms(x, w["output_norm.weight"]), "output.weight", "head").astype(np.float64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "smollm2-135m-instruct-q4_1.gguf"))
    ap.add_argument("--gen", type=int, default=59, help="greedy tokens after the prompt")
    args = ap.parse_args()
    w, c = load(args.model)
    ref, hf = load_ref(ROOT)
    toks, last = list(ref["tokens"]), len(ref["tokens"]) - 1
    for _ in range(args.gen):
        toks.append(int(forward(w, c, toks, variant())[-1].argmax()))
    base = forward(w, c, toks, variant())
    print(f"{len(toks)} tokens; float forward vs transformers at position {last}: "
          f"{np.linalg.norm(base[last] - hf) / np.linalg.norm(hf):.3e}")
    print(f"{'variant':34s} {'vs HF':>9s} {'mean':>9s} {'max':>9s} argmax  promoted")
    rows = [("int8 (the backends' 8-bit codes)", dict(bits=8)), ("int16 (cpu_act16 / cuda_act16)", dict(bits=16))]
    rows += [(f"int{b}", dict(bits=b)) for b in (9, 10, 12)]
    rows += [("int8, 16-element blocks", dict(bits=8, block=16))]
    rows += [(f"int8 on {k} only", dict(bits=8, only={k})) for k in MATMULS]
    rows += [(f"int8, 16-bit where amax > {t} x median", dict(bits=8, promote=t)) for t in (8, 4, 2)]
    for name, kw in rows:
        stats = {}
        lg = forward(w, c, toks, variant(stats=stats, **kw))
        r = np.linalg.norm(lg - base, axis=1) / np.linalg.norm(base, axis=1)
        pr = " ".join(f"{k} {np.mean(v):.3f}" for k, v in stats.items())
        print(f"{name:34s} {np.linalg.norm(lg[last] - hf) / np.linalg.norm(hf):9.3e} {r.mean():9.3e} "
              f"{r.max():9.3e} {np.mean(lg.argmax(1) == base.argmax(1)):6.3f}  {pr}", flush=True)


if __name__ == "__main__":
    main()
