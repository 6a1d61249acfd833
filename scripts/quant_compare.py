#!/usr/bin/env python3
"""lmfuse quantize vs llama-quantize, error per tensor (issue 54, item 5).

Given a float GGUF (the source both tools quantized), llama-quantize's output and lmfuse's output
for one type or mix, reads all three with gguf.GGUFReader, dequantizes the two outputs with
gguf.quants.dequantize (gguf-py's reference decoder, not lmfuse's) and prints per tensor the type
each tool chose, the RMSE of each against the source and the ratio lmfuse / llama. Then a summary
per type (tensors where both tools chose that type) and overall, weighted by element count
(RMSE over the pooled elements: sqrt(sum of squared errors / elements)).

  quant_compare.py SRC.gguf LLAMA.gguf LMFUSE.gguf [--label q4_k_m] [--tol 1.02] [--json OUT]
      exit 1 if a tensor that both tools quantized to the same type has
      lmfuse RMSE > tol x llama's (those are listed at the end)
  quant_compare.py --mix-only [SRC.gguf] LLAMA.gguf LMFUSE.gguf
      only compare the per-tensor type choices; exit 1 if any differ (listed)
  quant_compare.py --table A.json B.json ...
      one markdown table from the --json files of earlier runs

The type mix is compared in every mode (a mix difference alone does not fail the error check:
tensors of different types are reported, not compared against the tolerance).
"""
import argparse
import json
import math
import sys

import numpy as np

try:
    import gguf
    from gguf.quants import dequantize
except ImportError:  # pragma: no cover
    sys.exit("quant_compare.py: needs gguf-py and numpy (use the repo's .venv/bin/python)")

CHUNK_ELEMS = 1 << 24  # rows dequantized at a time: bounds memory on the 150k-row embeddings


def tensors(path):
    r = gguf.GGUFReader(path)
    return r, {t.name: t for t in r.tensors}


def ftype_of(reader):
    f = reader.fields.get("general.file_type")
    return int(f.parts[f.data[0]][0]) if f is not None else None


def as_rows(t):
    """The tensor's data as a 2-D array of rows (float, or uint8 bytes per row for quant types)."""
    d = t.data
    if d.ndim == 1:
        d = d.reshape(1, -1)
    elif d.ndim > 2:
        d = d.reshape(-1, d.shape[-1])
    return d


def tensor_sse(src, a, b):
    """Sums of squared errors of a and b against src (float64), chunked over rows."""
    s, x, y = as_rows(src), as_rows(a), as_rows(b)
    if not (s.shape[0] == x.shape[0] == y.shape[0]):
        raise ValueError(f"{src.name}: row counts differ: {s.shape[0]}, {x.shape[0]}, {y.shape[0]}")
    cols = int(src.shape[0])
    step = max(1, CHUNK_ELEMS // max(1, cols))
    sse_a = sse_b = 0.0
    sq = 0.0
    for r0 in range(0, s.shape[0], step):
        r1 = min(s.shape[0], r0 + step)
        ref = dequantize(s[r0:r1], src.tensor_type).astype(np.float64).reshape(r1 - r0, -1)
        da = dequantize(x[r0:r1], a.tensor_type).astype(np.float64).reshape(r1 - r0, -1) - ref
        db = dequantize(y[r0:r1], b.tensor_type).astype(np.float64).reshape(r1 - r0, -1) - ref
        sse_a += float(np.einsum("ij,ij->", da, da))
        sse_b += float(np.einsum("ij,ij->", db, db))
        sq += float(np.einsum("ij,ij->", ref, ref))
    return sse_a, sse_b, sq


def ratio(a, b):
    if b == 0:
        return 1.0 if a == 0 else math.inf
    return a / b


def mix_diff(llama, lmf):
    rows = []
    for name in sorted(set(llama) | set(lmf)):
        ta = llama[name].tensor_type.name if name in llama else "-"
        tb = lmf[name].tensor_type.name if name in lmf else "-"
        if ta != tb:
            rows.append((name, ta, tb))
    return rows


def type_counts(ts):
    c = {}
    for t in ts.values():
        c[t.tensor_type.name] = c.get(t.tensor_type.name, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items()))


def print_mix(label, llama, lmf, diffs, out):
    print(f"[{label}] type mix  llama: {type_counts(llama)}", file=out)
    print(f"[{label}] type mix lmfuse: {type_counts(lmf)}", file=out)
    if not diffs:
        print(f"[{label}] type mix: the same for all {len(llama)} tensors", file=out)
        return
    print(f"[{label}] type mix: {len(diffs)} of {len(set(llama) | set(lmf))} tensors differ "
          f"(tensor: llama -> lmfuse):", file=out)
    # Group identical (llama, lmfuse) pairs over layers: "blk.{0,3,...}.attn_v.weight".
    groups = {}
    for name, ta, tb in diffs:
        key = name
        layer = None
        if name.startswith("blk."):
            parts = name.split(".", 2)
            if len(parts) == 3 and parts[1].isdigit():
                key, layer = "blk.*." + parts[2], int(parts[1])
        groups.setdefault((key, ta, tb), []).append(layer)
    for (key, ta, tb), layers in sorted(groups.items()):
        where = ""
        if layers[0] is not None:
            where = " layers " + ",".join(str(i) for i in sorted(layers))
        print(f"  {key:32s} {ta:>7s} -> {tb:<7s}{where}", file=out)


def compare(args):
    out = sys.stdout
    label = args.label or args.lmfuse
    r_ll, llama = tensors(args.llama)
    r_lm, lmf = tensors(args.lmfuse)
    diffs = mix_diff(llama, lmf)
    ft_ll, ft_lm = ftype_of(r_ll), ftype_of(r_lm)
    print(f"[{label}] source {args.src or '(not read)'}\n[{label}] llama  {args.llama} (general.file_type {ft_ll})"
          f"\n[{label}] lmfuse {args.lmfuse} (general.file_type {ft_lm})", file=out)
    if args.mix_only:
        print_mix(label, llama, lmf, diffs, out)
        if ft_ll != ft_lm:
            print(f"[{label}] general.file_type differs: llama {ft_ll}, lmfuse {ft_lm}", file=out)
        return 1 if diffs or ft_ll != ft_lm else 0
    _, src = tensors(args.src)

    rows = []
    print(f"{'tensor':34s} {'elements':>10s} {'llama':>7s} {'lmfuse':>7s} {'rmse llama':>11s} "
          f"{'rmse lmfuse':>11s} {'ratio':>7s}", file=out)
    for name, s in src.items():
        if name not in llama or name not in lmf:
            print(f"{name:34s} missing in {'llama' if name not in llama else 'lmfuse'} output", file=out)
            continue
        a, b = llama[name], lmf[name]
        n = int(s.n_elements)
        sse_a, sse_b, sq = tensor_sse(s, a, b)
        ra, rb = math.sqrt(sse_a / n), math.sqrt(sse_b / n)
        q = ratio(rb, ra)
        same = a.tensor_type == b.tensor_type
        flag = ""
        if same and rb > args.tol * ra:
            flag = " WORSE"
        elif not same:
            flag = " (types differ)"
        if a.tensor_type.name != s.tensor_type.name or b.tensor_type.name != s.tensor_type.name or args.all:
            print(f"{name:34s} {n:10d} {a.tensor_type.name:>7s} {b.tensor_type.name:>7s} {ra:11.4e} "
                  f"{rb:11.4e} {q:7.4f}{flag}", file=out)
        rows.append(dict(name=name, n=n, llama_type=a.tensor_type.name, lmfuse_type=b.tensor_type.name,
                         src_type=s.tensor_type.name, sse_llama=sse_a, sse_lmfuse=sse_b, sq=sq,
                         rmse_llama=ra, rmse_lmfuse=rb, ratio=q))

    # Per type: tensors where both chose it, quantized ones only (copied tensors have no error).
    print(f"\n[{label}] per type (tensors where both tools chose the type; RMSE pooled over elements):", file=out)
    print(f"  {'type':8s} {'tensors':>7s} {'elements':>11s} {'rmse llama':>11s} {'rmse lmfuse':>11s} "
          f"{'ratio':>7s} {'worst':>7s}  worst tensor", file=out)
    by_type = {}
    for r in rows:
        if r["llama_type"] == r["lmfuse_type"] and r["llama_type"] != r["src_type"]:
            by_type.setdefault(r["llama_type"], []).append(r)
    summary_types = {}
    for ty, rs in sorted(by_type.items()):
        n = sum(r["n"] for r in rs)
        ea = math.sqrt(sum(r["sse_llama"] for r in rs) / n)
        eb = math.sqrt(sum(r["sse_lmfuse"] for r in rs) / n)
        worst = max(rs, key=lambda r: r["ratio"])
        summary_types[ty] = dict(tensors=len(rs), elements=n, rmse_llama=ea, rmse_lmfuse=eb,
                                 ratio=ratio(eb, ea), worst_ratio=worst["ratio"], worst_tensor=worst["name"])
        print(f"  {ty:8s} {len(rs):7d} {n:11d} {ea:11.4e} {eb:11.4e} {ratio(eb, ea):7.4f} "
              f"{worst['ratio']:7.4f}  {worst['name']}", file=out)

    def pooled(rs):
        n = sum(r["n"] for r in rs)
        if n == 0:
            return 0, 0.0, 0.0
        return n, math.sqrt(sum(r["sse_llama"] for r in rs) / n), math.sqrt(sum(r["sse_lmfuse"] for r in rs) / n)

    n_all, ea, eb = pooled(rows)
    same_rows = [r for r in rows if r["llama_type"] == r["lmfuse_type"]]
    n_same, sa, sb = pooled(same_rows)
    quant_same = [r for r in same_rows if r["llama_type"] != r["src_type"]]
    worst = max(quant_same, key=lambda r: r["ratio"]) if quant_same else None
    src_rms = math.sqrt(sum(r["sq"] for r in rows) / max(1, n_all))
    print(f"[{label}] overall, all {len(rows)} tensors ({n_all} elements): rmse llama {ea:.4e}, "
          f"lmfuse {eb:.4e}, ratio {ratio(eb, ea):.4f} (source rms {src_rms:.4e})", file=out)
    print(f"[{label}] overall, the {len(same_rows)} tensors of the same type ({n_same} elements): "
          f"rmse llama {sa:.4e}, lmfuse {sb:.4e}, ratio {ratio(sb, sa):.4f}", file=out)
    if worst:
        print(f"[{label}] worst same-type tensor: {worst['name']} ({worst['llama_type']}) ratio "
              f"{worst['ratio']:.4f}", file=out)
    print_mix(label, llama, lmf, diffs, out)
    bad = [r for r in quant_same if r["rmse_lmfuse"] > args.tol * r["rmse_llama"]]
    if bad:
        print(f"[{label}] FAIL: {len(bad)} same-type tensors with lmfuse RMSE > {args.tol} x llama's:", file=out)
        for r in sorted(bad, key=lambda r: -r["ratio"]):
            print(f"  {r['name']:34s} {r['llama_type']:>7s} llama {r['rmse_llama']:.4e} lmfuse "
                  f"{r['rmse_lmfuse']:.4e} ratio {r['ratio']:.4f}", file=out)
    else:
        print(f"[{label}] PASS: every same-type tensor has lmfuse RMSE <= {args.tol} x llama's", file=out)

    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(label=label, src=args.src, llama=args.llama, lmfuse=args.lmfuse,
                           file_type_llama=ft_ll, file_type_lmfuse=ft_lm, tol=args.tol,
                           overall=dict(elements=n_all, rmse_llama=ea, rmse_lmfuse=eb, ratio=ratio(eb, ea)),
                           same_type=dict(tensors=len(same_rows), elements=n_same, rmse_llama=sa,
                                          rmse_lmfuse=sb, ratio=ratio(sb, sa)),
                           worst=None if worst is None else dict(name=worst["name"], type=worst["llama_type"],
                                                                 ratio=worst["ratio"]),
                           per_type=summary_types, n_fail=len(bad),
                           mix_diffs=[dict(name=n, llama=a, lmfuse=b) for n, a, b in diffs],
                           tensors=[{k: v for k, v in r.items() if k not in ("sse_llama", "sse_lmfuse", "sq")}
                                    for r in rows]),
                      f, indent=1)
    return 1 if bad else 0


def table(paths):
    print("| run | rmse llama | rmse lmfuse | ratio | same-type ratio | per type: ratio (worst) | "
          "worst same-type tensor | fails > tol | type mix |")
    print("|---|---|---|---|---|---|---|---|---|")
    rc = 0
    for p in paths:
        with open(p) as f:
            j = json.load(f)
        o, s, w = j["overall"], j["same_type"], j["worst"]
        worst = f"{w['ratio']:.4f} {w['name']} ({w['type']})" if w else "-"
        d = j["mix_diffs"]
        if d:
            pairs = {}
            for x in d:
                pairs[(x["llama"], x["lmfuse"])] = pairs.get((x["llama"], x["lmfuse"]), 0) + 1
            mix = f"{len(d)} differ: " + ", ".join(f"{n}x {a}->{b}" for (a, b), n in sorted(pairs.items()))
        else:
            mix = "same"
        if j["file_type_llama"] != j["file_type_lmfuse"]:
            mix += f"; file_type {j['file_type_llama']} vs {j['file_type_lmfuse']}"
        per = ", ".join(f"{t} {v['ratio']:.3f} ({v['worst_ratio']:.3f})" for t, v in sorted(j["per_type"].items()))
        print(f"| {j['label']} | {o['rmse_llama']:.4e} | {o['rmse_lmfuse']:.4e} | {o['ratio']:.4f} | "
              f"{s['ratio']:.4f} | {per} | {worst} | {j['n_fail']} | {mix} |")
        rc |= 1 if j["n_fail"] else 0
    return rc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("files", nargs="+", help="SRC LLAMA LMFUSE (--mix-only: [SRC] LLAMA LMFUSE; --table: JSONs)")
    ap.add_argument("--mix-only", action="store_true", help="only compare the per-tensor type choices")
    ap.add_argument("--table", action="store_true", help="print a markdown table of --json results")
    ap.add_argument("--label", default="", help="name of this run in the output (default: the lmfuse file)")
    ap.add_argument("--tol", type=float, default=1.02, help="allowed lmfuse / llama RMSE ratio (default 1.02)")
    ap.add_argument("--json", default="", help="also write the results to this JSON file")
    ap.add_argument("--all", action="store_true", help="also list tensors both tools copied unchanged")
    a = ap.parse_args()
    if a.table:
        return table(a.files)
    if a.mix_only and len(a.files) == 2:
        a.files = [None] + a.files
    if len(a.files) != 3:
        ap.error(f"expected SRC LLAMA LMFUSE, got {len(a.files)} files")
    a.src, a.llama, a.lmfuse = a.files
    return compare(a)


if __name__ == "__main__":
    sys.exit(main())
