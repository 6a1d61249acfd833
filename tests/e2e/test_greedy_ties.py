#!/usr/bin/env python3
"""scripts/check_models.py's greedy agreement (device vs CPU): a difference passes only as a
rounding tie or an activation code flip within the row's own 8-bit activation error, and
generation then goes on from the CPU's token so every token is still compared.
The decision on synthetic logits rows and scripted generations (the GPU machine runs it on CUDA);
then the real binary, CPU against CPU, which must agree with no tie."""
import os, sys
try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is not installed (scripts/setup.sh installs it)")
    sys.exit(77)

SRC = os.environ.get("LMFUSE_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXE = os.environ.get("LMFUSE_BIN", os.path.join(SRC, "build", "lmfuse"))
sys.path.insert(0, os.path.join(SRC, "scripts"))
import check_models as cm  # noqa: E402

failures = 0


def expect(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)


def tie_rows(V=50, a=7, b=19, seed=0):
    """A CPU row whose top two (a over b) differ by 1e-6, and a device row that flips them with
    rounding-sized differences everywhere (|d - c| up to 4e-6)."""
    rng = np.random.default_rng(seed)
    cpu = rng.normal(0, 1, V)
    cpu[a], cpu[b] = 10.0 + 1e-6, 10.0
    dev = cpu + rng.uniform(-4e-6, 4e-6, V)
    dev[a], dev[b] = 10.0 - 1e-6, 10.0 + 1e-6
    return dev, cpu


def test_classify():
    dev, cpu = tie_rows()
    tie, margin, bound, rel = cm.classify_difference(dev, cpu, 19, 7)
    expect(tie and 0 < margin <= bound and rel < 1e-5, f"a rounding flip is a tie ({margin}, {bound}, {rel})")
    # The same flip with a wide margin on the CPU (its token 0.5 ahead): not a tie.
    cpu2 = cpu.copy()
    cpu2[7] = 10.5
    expect(not cm.classify_difference(dev, cpu2, 19, 7)[0], "a margin beyond the rows' difference is not a tie")
    # Rows that disagree (rel-L2 > 1e-3) with a small margin: not a tie.
    far = dev + np.random.default_rng(1).normal(0, 0.5, dev.size)
    far[19] = 20.0
    expect(not cm.classify_difference(far, cpu, 19, 7)[0], "rows beyond the rel-L2 gate are not a tie")
    # A row whose argmax is not the backend's own token (a different path): not a tie.
    expect(not cm.classify_difference(dev, cpu, 3, 7)[0], "a row that does not reproduce its token is not a tie")
    # A code flip: rows 5e-3 apart pass only within the row's own 8-bit activation error.
    dev, cpu, c16 = flip_rows()
    rel16 = cm.rel_l2(c16, cpu)
    expect(not cm.classify_difference(dev, cpu, 19, 7)[0], "rows 5e-3 apart are not a plain tie")
    expect(cm.classify_difference(dev, cpu, 19, 7, rel16)[0], f"a code flip within the 8-bit error ({rel16:.1e})")
    expect(not cm.classify_difference(dev, cpu, 19, 7, 2e-3)[0], "a flip beyond the 8-bit error is not a tie")


def flip_rows(V=50, a=7, b=19, seed=0, quant=1e-2):
    """A code flip: device and CPU rows 5e-3 apart (rel-L2), the CPU's token 0.02 ahead of the
    device's, which the device's row puts 0.02 ahead; and the CPU's 16-bit-activation row, `quant`
    (rel-L2) from its 8-bit one."""
    rng = np.random.default_rng(seed)
    cpu = rng.normal(0, 1, V)
    cpu[a], cpu[b] = 5.02, 5.0
    dev = cpu + rng.normal(0, 1, V) * 5e-3 * np.linalg.norm(cpu) / np.sqrt(V)
    dev[a], dev[b] = 5.0, 5.02
    c16 = cpu + rng.normal(0, 1, V) * quant * np.linalg.norm(cpu) / np.sqrt(V)
    return dev, cpu, c16


def scripted(dev_seq, cpu_seq, ties_at, V=50, flips_at=(), quant=1e-2):
    """gen / rows stand-ins: the backends generate from the prompt's tokens onward along fixed
    sequences, the device flipping at the positions in ties_at (a tie there, with tie_rows) and
    flips_at (a code flip, flip_rows, whose 8-bit activations move the CPU's row by `quant`)."""
    def gen(exe, model, ctx, device, n, ctx_size):
        start = len(ctx) - 3  # the prompt is 3 tokens; ctx holds the CPU's tokens before start
        seq = dev_seq if device != "cpu" else cpu_seq
        return list(seq[start:start + n])

    def rows(toks, device, pre):
        pos = len(toks) - 3
        a, b = cpu_seq[pos], dev_seq[pos]
        if pos in flips_at:
            dev, cpu, c16 = flip_rows(V, a, b, seed=pos, quant=quant)
        else:
            dev, cpu = tie_rows(V, a, b, seed=pos)
            if pos not in ties_at:  # a real difference: the CPU's token far ahead
                cpu[a] = 12.0
            c16 = cpu  # a float-weight model: no activation codes
        r = {"cpu": cpu, "cpu16": c16}.get(device, dev)
        return np.tile(r, len(toks))
    return gen, rows


def test_loop():
    cpu_seq = [5, 6, 7, 8, 9, 10, 11, 12]
    # One tie at 2: the device picks 30 there, then (fed the CPU's token) agrees.
    dev_seq = [5, 6, 30, 8, 9, 10, 11, 12]
    gen, rows = scripted(dev_seq, cpu_seq, {2})
    ok, ties, bad = cm.greedy_agreement("x", "m", [1, 2, 3], "cuda", 8, gen=gen, rows=rows)
    expect(ok and [t[0] for t in ties] == [2] and bad is None, f"one tie, then agreement: {ok} {ties} {bad}")
    # A real difference at 4: fails there.
    gen, rows = scripted([5, 6, 7, 8, 31, 10, 11, 12], cpu_seq, set())
    ok, ties, bad = cm.greedy_agreement("x", "m", [1, 2, 3], "cuda", 8, gen=gen, rows=rows)
    expect(not ok and bad.pos == 4 and (bad.tok_dev, bad.tok_cpu) == (31, 9) and ties == [],
           f"a real difference fails: {ok} {ties} {bad}")
    expect("difference at 4: device 31, CPU 9" in cm.describe(bad), cm.describe(bad))
    # Ties beyond max_ties fail.
    gen, rows = scripted([40, 41, 42, 8, 9, 10, 11, 12], cpu_seq, {0, 1, 2})
    ok, ties, bad = cm.greedy_agreement("x", "m", [1, 2, 3], "cuda", 8, max_ties=2, gen=gen, rows=rows)
    expect(not ok and bad.pos == 2 and len(ties) == 2 and bad.why == "a tie beyond the 2 allowed",
           f"a third tie with max_ties 2 fails: {ok} {ties} {bad}")
    # A code flip at 3 (rows 5e-3 apart, 8-bit activations move the row 1e-2): passes, named so.
    gen, rows = scripted([5, 6, 7, 32, 9, 10, 11, 12], cpu_seq, set(), flips_at={3})
    ok, ties, bad = cm.greedy_agreement("x", "m", [1, 2, 3], "cuda", 8, gen=gen, rows=rows)
    expect(ok and [t[0] for t in ties] == [3] and ties[0][3].startswith("code flip"), f"a code flip passes: {ok} {ties} {bad}")
    # The same rows where 8-bit activations move the row only 1e-3: a real difference.
    gen, rows = scripted([5, 6, 7, 32, 9, 10, 11, 12], cpu_seq, set(), flips_at={3}, quant=1e-3)
    ok, ties, bad = cm.greedy_agreement("x", "m", [1, 2, 3], "cuda", 8, gen=gen, rows=rows)
    expect(not ok and bad.pos == 3 and ties == [], f"a flip beyond the 8-bit error fails: {ok} {ties} {bad}")


def test_real_binary():
    model = os.path.join(SRC, "tests", "data", "golden", "qwen3-tiny-q4_0.gguf")
    ok, ties, bad = cm.greedy_agreement(EXE, model, [1, 2, 3, 4, 5, 6, 7, 8], "cpu", 24)
    expect(ok and not ties and bad is None, f"CPU against CPU: {ok} {ties} {bad}")


test_classify()
test_loop()
test_real_binary()
print("failures:", failures)
sys.exit(1 if failures else 0)
