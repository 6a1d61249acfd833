#!/usr/bin/env python3
"""Whole-model checks of a backend against the golden Hugging Face references and against the
CPU backend, through the `lmfuse logits` test contract (numpy only).

  python3 scripts/check_models.py --lmfuse build/lmfuse --device cuda

For every golden case, on the device with the default (automatic) prefill routing: logits of a
16-token prefill + 8 decode steps vs transformers (manifest tolerance) and vs the CPU backend
(reported). Then the self-consistency gates, with the prefill pinned to the in-kernel route
(LMFUSE_PREFILL_INKERNEL_DEQUANT=1: prefill takes the decode's int8 block arithmetic, so the
gates can be tight): fused vs unfused (LMFUSE_FUSION=0) rel-L2 <= 1e-3; one batched prefill vs
16-token prefill + 8 decode steps <= 1e-3; the prompt in chunks of 7 (--ubatch-size 7) vs one
prefill <= 1e-3; greedy generation of --gen tokens identical on CPU and
the device, a difference passing only as a rounding tie or an activation code flip within the
row's own 8-bit activation error (greedy_agreement), at most four. Finally one prefill through each forced route (in-kernel vs outer) within the
quantized-weight tolerance of each other (3e-2: the outer route rounds both factors to fp16; on
these small quantized models that moves int8 activation codes, ~1e-2), and the automatic routing
(routes timed per shape, a mix of the two) within the same 3e-2 of both. The CPU runs use 8-bit
activation blocks (LMFUSE_CPU_ACT16=0), the arithmetic the CUDA kernels share with it.

A case whose weight types the device's backend does not have (the K-quant mixes, Q6_K, IQ4_*,
Q5_0/Q5_1 on CUDA today: the backend refuses them at load with "unsupported ... type") gets a row
"not supported on <device>" naming the refused type and the file's types: neither a pass nor a
failure, counted on the summary line. Once the backend loads them they are checked like the rest."""
import argparse, collections, json, os, re, subprocess, sys, tempfile
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLD = os.path.join(ROOT, "tests", "data", "golden")


def rel_l2(a, b):
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b.astype(np.float64)))


def logits(exe, model, tokens, device, env_extra=None, prefill=16, ubatch=None, ctx=512):
    with tempfile.NamedTemporaryFile(suffix=".bin", delete=False) as f:
        out = f.name
    env = dict(os.environ, **(env_extra or {}))
    cmd = [exe, "logits", "-m", model, "--device", device, "--tokens", ",".join(map(str, tokens)),
           "--all", "-o", out, "-c", str(ctx)] + (["--prefill", str(prefill)] if prefill else []) + \
          (["--ubatch-size", str(ubatch)] if ubatch else [])
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    v = np.fromfile(out, dtype="<f4")
    os.unlink(out)
    return v


CPU8 = {"LMFUSE_CPU_ACT16": "0"}
PIN = {"LMFUSE_PREFILL_INKERNEL_DEQUANT": "1"}  # the exact (decode-arithmetic) prefill route


ACT16 = False  # --act16: the device's GEMVs take 16-bit activation codes, the CPU its default (16-bit)


def env_for(device):
    if ACT16:
        return {"LMFUSE_CPU_ACT16": "1"} if device == "cpu" else {"LMFUSE_CUDA_ACT16": "1"}
    return CPU8 if device == "cpu" else PIN


def generate(exe, model, tokens, device, n, ctx=None):
    cmd = [exe, "logits", "-m", model, "--device", device, "--tokens", ",".join(map(str, tokens)),
           "--generate", str(n), "-o", os.devnull, "-c", str(ctx or len(tokens) + n + 8)]
    r = subprocess.run(cmd, env=dict(os.environ, **env_for(device)), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    return [int(x) for x in r.stdout.split()]


TIE_REL_L2 = 1e-3  # the rows must agree as closely as the fused / unfused and prefill gates ask

# A greedy difference that is not a tie: its position, each backend's token, each recomputed row's
# argmax, the CPU's margin, the rows' largest difference and their rel-L2.
Difference = collections.namedtuple("Difference", "pos tok_dev tok_cpu argmax_dev argmax_cpu margin bound rel why")


def describe(d):
    return (f"difference at {d.pos}: device {d.tok_dev}, CPU {d.tok_cpu}; recomputed rows' argmax device "
            f"{d.argmax_dev}, CPU {d.argmax_cpu}; CPU margin {d.margin:.1e}, largest |device - CPU| {d.bound:.1e}, "
            f"rel-L2 {d.rel:.1e}: {d.why}")


def classify_difference(dev_row, cpu_row, tok_dev, tok_cpu, quant_rel=0.0):
    """Whether a greedy difference (the device chose tok_dev, the CPU tok_cpu) at one step is a
    rounding tie: each row's argmax is its backend's token (the rows were recomputed along the
    generation's path), the rows agree to rel-L2 <= TIE_REL_L2 (or, for a flipped activation code,
    <= quant_rel: see greedy_agreement), and the CPU's margin of its token over the device's is
    within the largest |device - CPU| logit difference of the row, so the two backends' rounding
    alone decides between them. Returns (tie, CPU margin, that bound, rel-L2)."""
    dev_row = np.asarray(dev_row, dtype=np.float64)
    cpu_row = np.asarray(cpu_row, dtype=np.float64)
    err = float(np.max(np.abs(dev_row - cpu_row)))
    margin = float(cpu_row[tok_cpu] - cpu_row[tok_dev])
    rel = rel_l2(dev_row, cpu_row)
    tie = (int(np.argmax(dev_row)) == tok_dev and int(np.argmax(cpu_row)) == tok_cpu
           and rel <= max(TIE_REL_L2, quant_rel) and 0 <= margin <= err)
    return tie, margin, err, rel


def greedy_agreement(exe, model, prompt, device, n, max_ties=4, gen=generate, rows=None):
    """Greedy generation of n tokens on the device against the CPU. Every token must match; a
    difference passes only as a rounding tie (classify_difference, on the last row of both
    backends' logits for the common prefix: the prompt as one prefill, then one decode step per
    token, as the generation ran), after which both continue from the CPU's token, so all n
    tokens are still compared. At most max_ties ties. Returns (ok, [(position, margin, bound, kind)],
    the failing Difference or None).

    Two kinds of tie. "tie": the rows agree to TIE_REL_L2. "code flip": quantized-weight models
    quantize each matmul's activations to int8 codes per 32-block (the CPU's 8-bit activations and
    the device's kernels alike); the backends' fp32 sums before it agree to ~1e-7, but a value
    within that of a rounding boundary gets codes one apart, which moves that step's row by a
    share of what 8-bit activations move it in all (qwen2-tiny-q4_0, docs/PERF.md S36-6: rows at
    1e-7 for 47 steps, then 6.5e-3 at one, 2.5e-6 at the next). So the rows may differ by up to
    the row's own 8-bit activation error, measured: the CPU's row with 16-bit activations
    ("cpu16") against its 8-bit row. A float-weight model has no codes (that error is 0), so only
    "tie" applies there."""
    ctx_size = len(prompt) + n + 8  # one context size for every run (the attention's plan follows it)
    rows = rows or (lambda toks, dev, pre: logits(exe, model, toks, "cpu" if dev == "cpu16" else dev,
                                                  {"LMFUSE_CPU_ACT16": "1"} if dev == "cpu16" else env_for(dev),
                                                  prefill=pre, ctx=ctx_size))
    ctx, done, ties = list(prompt), 0, []
    while done < n:
        g_dev = gen(exe, model, ctx, device, n - done, ctx_size)
        g_cpu = gen(exe, model, ctx, "cpu", n - done, ctx_size)
        k = next((i for i, (a, b) in enumerate(zip(g_dev, g_cpu)) if a != b), None)
        if k is None:
            return (len(g_dev) == len(g_cpu) == n - done), ties, None
        common = ctx + g_cpu[:k]
        d = rows(common, device, len(ctx))
        c = rows(common, "cpu", len(ctx))
        V = d.size // len(common)
        tie, margin, bound, rel = classify_difference(d[-V:], c[-V:], g_dev[k], g_cpu[k])
        kind = "tie"
        if not tie and rel > TIE_REL_L2:
            q = rel_l2(rows(common, "cpu16", len(ctx))[-V:], c[-V:])
            tie, kind = classify_difference(d[-V:], c[-V:], g_dev[k], g_cpu[k], q)[0], f"code flip (8-bit activations move the row {q:.1e})"
        if not tie or len(ties) == max_ties:
            why = "not a tie" if not tie else f"a tie beyond the {max_ties} allowed"
            return False, ties, Difference(done + k, g_dev[k], g_cpu[k], int(np.argmax(d[-V:])),
                                           int(np.argmax(c[-V:])), margin, bound, rel, why)
        ties.append((done + k, margin, bound, f"{kind}, rel-L2 {rel:.1e}"))
        ctx = common + [g_cpu[k]]
        done += k + 1
    return True, ties, None


def greedy_cell(args, model, tokens):
    """(ok, the table cell) of greedy_agreement over args.gen tokens from the first 8 of tokens;
    (True, "-") with --gen 0."""
    if args.gen <= 0:
        return True, "-"
    g_ok, ties, bad = greedy_agreement(args.lmfuse, model, tokens[:8], args.device, args.gen)
    tie_s = "; ".join(f"{kind} at {p}: margin {m:.1e} <= {b:.1e}" for p, m, b, kind in ties)
    return g_ok, ("yes" if g_ok else f"no ({describe(bad)})") + (f" ({tie_s})" if ties else "")


class NotSupported(Exception):
    """The device's backend refused the model's weight type at load (the row says so)."""


# The backends' load errors for a weight type they have no kernels for (e.g. CUDA's "cuda repack:
# unsupported weight type Q4_K", "cuda embed: unsupported type Q6_K").
UNSUPPORTED_TYPE = re.compile(r"unsupported (?:weight )?type (\w+)")


def device_logits(exe, model, tokens, device, case, env_extra=None):
    """logits() on the device, raising NotSupported when its backend refuses a weight type of the
    model (never for the CPU, which runs every type: there it is an error like any other)."""
    try:
        return logits(exe, model, tokens, device, env_extra)
    except RuntimeError as ex:
        m = UNSUPPORTED_TYPE.search(str(ex))
        if device == "cpu" or not m:
            raise
        types = sorted(set(case.get("tensor_types", {}).values()))
        raise NotSupported(f"not supported on {device}: {m.group(1)} refused at load"
                           + (f" (file types {', '.join(types)})" if types else "")) from ex


def table(header, cases, row):
    """Prints a markdown table: the header's cells, then row(case) -> (ok, cells) for each (name,
    case) in cases, " **FAIL**" after a row that is not ok, an error row for a case that raises
    (the other cases still run), a "not supported" row for one that raises NotSupported; then the
    failure count and the not-supported count. Returns the exit status (not-supported cases do not
    fail it)."""
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    failures, unsupported = 0, 0
    for name, case in cases:
        try:
            ok, cells = row(case)
            print("| " + " | ".join([name, *cells]) + " |" + ("" if ok else " **FAIL**"))
        except NotSupported as ex:
            ok = True
            unsupported += 1
            print(f"| {name} | {ex} |" + " |" * (len(header) - 2))
        except Exception as ex:  # report and continue with the other cases
            ok = False
            print(f"| {name} | error: {ex} |" + " |" * (len(header) - 2) + " **FAIL**")
        failures += not ok
        sys.stdout.flush()
    print(f"\n{failures} case(s) failed" + (f", {unsupported} not supported on the device (not checked)" if unsupported else ""))
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lmfuse", default=os.path.join(ROOT, "build", "lmfuse"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--gen", type=int, default=256)
    ap.add_argument("--model", help="compare this model on the device against the CPU instead of the golden set")
    ap.add_argument("--act16", action="store_true",
                    help="the quantized cases with 16-bit activation codes on the device (knob cuda_act16) against "
                         "the CPU's default 16-bit path and the references, beside the int8 codes")
    args = ap.parse_args()
    if args.act16:
        return act16_table(args)
    if args.model:
        toks = [int(x) for x in np.random.default_rng(0).integers(0, 1000, 24)]
        try:
            dev = device_logits(args.lmfuse, args.model, toks, args.device, {}, PIN)
        except NotSupported as ex:
            print(f"{os.path.basename(args.model)}: {ex}")
            return 0
        cpu = logits(args.lmfuse, args.model, toks, "cpu", CPU8)
        unf = logits(args.lmfuse, args.model, toks, args.device, {**PIN, "LMFUSE_FUSION": "0"})
        one = logits(args.lmfuse, args.model, toks, args.device, PIN, prefill=None)
        g_dev = generate(args.lmfuse, args.model, toks[:8], args.device, args.gen)
        g_cpu = generate(args.lmfuse, args.model, toks[:8], "cpu", args.gen)
        first = next((i for i, (a, b) in enumerate(zip(g_dev, g_cpu)) if a != b), len(g_dev))
        print(f"{os.path.basename(args.model)}: {args.device} vs cpu rel-L2 {rel_l2(dev, cpu):.2e}, fused vs unfused "
              f"{rel_l2(dev, unf):.2e}, prefill+decode vs one prefill {rel_l2(dev, one):.2e}, greedy {args.gen}: "
              f"identical for the first {first} tokens")
        return 0 if rel_l2(dev, cpu) < 3e-2 and rel_l2(dev, unf) <= 1e-3 and rel_l2(dev, one) <= 1e-3 else 1
    man = json.load(open(os.path.join(GOLD, "manifest.json")))

    def row(c):
        model = os.path.join(GOLD, c["gguf"])
        want = np.fromfile(os.path.join(GOLD, c["logits"]), dtype="<f4")
        V = c["n_vocab"]
        dev = device_logits(args.lmfuse, model, c["tokens"], args.device, c)
        cpu = logits(args.lmfuse, model, c["tokens"], "cpu", CPU8)
        pin = logits(args.lmfuse, model, c["tokens"], args.device, PIN)
        unf = logits(args.lmfuse, model, c["tokens"], args.device, {**PIN, "LMFUSE_FUSION": "0"})
        ik = logits(args.lmfuse, model, c["tokens"], args.device, PIN, prefill=None)
        chunked = logits(args.lmfuse, model, c["tokens"], args.device, PIN, prefill=None, ubatch=7)
        ou = logits(args.lmfuse, model, c["tokens"], args.device, {"LMFUSE_PREFILL_INKERNEL_DEQUANT": "0"}, prefill=None)
        e_hf, e_cpu, e_fu, e_one = rel_l2(dev, want), rel_l2(dev, cpu), rel_l2(pin, unf), rel_l2(pin, ik)
        au = logits(args.lmfuse, model, c["tokens"], args.device, {}, prefill=None)
        e_route = rel_l2(ik, ou)
        e_auto = max(rel_l2(au, ik), rel_l2(au, ou))
        e_chunk = rel_l2(chunked, ik)
        am = float(np.mean(dev.reshape(-1, V).argmax(1) == want.reshape(-1, V).argmax(1)))
        tol = c["tolerance"]
        ok = e_hf <= tol["rel_l2"] and am >= tol.get("argmax_agreement", 0) and e_fu <= 1e-3 and e_one <= 1e-3 and e_route <= 3e-2 and e_auto <= 3e-2 and e_chunk <= 1e-3
        g_ok, same = greedy_cell(args, model, c["tokens"])
        return ok and g_ok, [f"{e_hf:.2e} ({tol['rel_l2']:.0e})", f"{am:.3f}", f"{e_cpu:.2e}", f"{e_fu:.2e}", f"{e_one:.2e}",
                             f"{e_chunk:.2e}", f"{e_route:.2e}", f"{e_auto:.2e}", same]

    return table(["case", "vs HF rel-L2 (tol)", "argmax", "vs CPU rel-L2", "fused vs unfused (pinned)",
                  "prefill+decode vs one prefill (pinned)", "chunks of 7 vs one prefill (pinned)",
                  "in-kernel vs outer prefill", "auto vs forced (max)", f"greedy {args.gen} = CPU (pinned)"],
                 [(c["name"], c) for c in man["cases"]], row)


def act16_table(args):
    """Quantized golden cases (and --model): the device with 16-bit activation codes must meet the
    float models' tolerance against the references, agree with the CPU's 16-bit path, and give its
    greedy tokens; the int8 codes' figures are printed beside them."""
    global ACT16
    ACT16 = True
    dev16, cpu16 = env_for(args.device), env_for("cpu")
    cases = []
    if args.model:
        toks = [int(x) for x in np.random.default_rng(0).integers(0, 1000, 24)]
        cases.append((os.path.basename(args.model), args.model, toks, None, 1e-3))
    else:
        man = json.load(open(os.path.join(GOLD, "manifest.json")))
        for c in man["cases"]:
            if c["name"].split("-")[-1] in ("q4_0", "q4_1", "q8_0"):
                want = np.fromfile(os.path.join(GOLD, c["logits"]), dtype="<f4")
                cases.append((c["name"], os.path.join(GOLD, c["gguf"]), c["tokens"], want, 1e-3))

    def row(case):
        model, toks, want, tol = case
        d8 = logits(args.lmfuse, model, toks, args.device, {})
        d16 = logits(args.lmfuse, model, toks, args.device, dev16)
        c16 = logits(args.lmfuse, model, toks, "cpu", cpu16)
        u16 = logits(args.lmfuse, model, toks, args.device, {**dev16, "LMFUSE_FUSION": "0"})
        ref = c16 if want is None else want
        e8, e16, e_cpu, e_fu = rel_l2(d8, ref), rel_l2(d16, ref), rel_l2(d16, c16), rel_l2(d16, u16)
        ok = e16 <= tol and e_cpu <= 1e-3 and e_fu <= 1e-3
        g_ok, same = greedy_cell(args, model, toks)
        return ok and g_ok, [f"{e8:.2e}", f"{e16:.2e} ({tol:.0e})", f"{e_cpu:.2e}", f"{e_fu:.2e}", same]

    return table(["case", "vs HF, int8 codes", "vs HF, 16-bit codes (tol)", "vs CPU 16-bit", "fused vs unfused",
                  f"greedy {args.gen} = CPU 16-bit"], [(name, rest) for name, *rest in cases], row)


if __name__ == "__main__":
    sys.exit(main())
