#!/usr/bin/env python3
"""`lmfuse chat` in a real terminal: tmux runs it, keys are sent, the screen is read. Two turns
(the second relies on the first through the kept conversation), Ctrl-C stops an answer without
ending the program, /clear, and Ctrl-D exits. Skips, saying why, without tmux or the demo model."""
import os, shutil, subprocess, sys, time

SRC = os.environ.get("LMFUSE_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXE = os.environ.get("LMFUSE_BIN", os.path.join(SRC, "build", "lmfuse"))
MODEL = os.path.join(SRC, "models", "smollm2-135m-instruct-q4_1.gguf")
SESSION = f"lmfuse_chat_{os.getpid()}"


def tmux(*args):
    return subprocess.run(["tmux", *args], capture_output=True, text=True)


def screen():
    """The pane's text with wrapped lines joined (-J), so a word the 160-column pane breaks across
    two rows (CI saw "[" and "stopped]" on two rows) still matches; -J keeps trailing spaces, which
    are stripped per line as tmux does without it."""
    out = tmux("capture-pane", "-t", SESSION, "-p", "-J", "-S", "-200").stdout
    return "\n".join(l.rstrip() for l in out.splitlines())


def wait_for(pred, timeout=60):
    t0 = time.time()
    while time.time() - t0 < timeout:
        s = screen()
        if pred(s):
            return s
        time.sleep(0.2)
    return screen()


def prompts(s):
    """Number of input prompts on the screen (tmux trims the space after a bare '>')."""
    return sum(1 for l in s.splitlines() if l == ">" or l.startswith("> "))


def main():
    if not shutil.which("tmux"):
        print("SKIP: tmux is not installed")
        return 77
    if not os.path.exists(MODEL):
        print("SKIP: demo model missing (scripts/get-demo-model.sh)")
        return 77
    failures = []

    def check(name, ok, detail=""):
        print(("PASS " if ok else "FAIL ") + name)
        if not ok:
            print(detail)
            failures.append(name)

    cmd = f"{EXE} chat -m {MODEL} --temp 0 --system 'You are a helpful assistant.' -t 2; echo EXITED=$?; sleep 60"
    tmux("new-session", "-d", "-s", SESSION, "-x", "160", "-y", "50", cmd)
    try:
        s = wait_for(lambda s: prompts(s) >= 1)
        check("prompt shown", prompts(s) >= 1, s)
        tmux("send-keys", "-t", SESSION, "What is the capital of France?", "Enter")
        s = wait_for(lambda s: prompts(s) >= 2)
        check("first answer names Paris", "Paris" in s, s)
        tmux("send-keys", "-t", SESSION, "Repeat the name of that city in one word.", "Enter")
        s = wait_for(lambda s: prompts(s) >= 3)
        second = s.split("Repeat the name of that city in one word.")[-1]
        check("second turn uses the conversation", "Paris" in second, s)
        tmux("send-keys", "-t", SESSION, "Write a very long story about a dragon, with many chapters.", "Enter")
        time.sleep(1.5)
        tmux("send-keys", "-t", SESSION, "C-c")
        s = wait_for(lambda s: "[stopped]" in s, 30)
        check("Ctrl-C stops the answer", "[stopped]" in s, s)
        s = wait_for(lambda s: s.rstrip().endswith(">"), 10)
        check("program still running after Ctrl-C", "EXITED=" not in s, s)
        tmux("send-keys", "-t", SESSION, "/clear", "Enter")
        s = wait_for(lambda s: "conversation cleared" in s and s.rstrip().endswith(">"), 10)
        check("/clear", "conversation cleared" in s, s)
        tmux("send-keys", "-t", SESSION, "C-d")
        s = wait_for(lambda s: "EXITED=" in s, 10)
        check("Ctrl-D exits with status 0", "EXITED=0" in s, s)
    finally:
        tmux("kill-session", "-t", SESSION)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
