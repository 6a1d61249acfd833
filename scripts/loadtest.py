#!/usr/bin/env python3
"""Load test for an OpenAI-compatible server (lmfuse serve, llama-server, vLLM).

C concurrent clients send streaming requests (stream: true, max_tokens: N, temperature: 0,
ignore_eos: true) with distinct prompts until a fixed total of requests (--prompts, default C)
is done, and report:
  - aggregate generated tokens/s: all completion tokens / wall time from the first request's
    start to the last one's end. Tokens come from the final usage chunk when the server honours
    stream_options.include_usage, else from the number of content chunks (marked "chunks").
  - time to first token (TTFT) p50/p90/p99: request sent -> first content chunk.
  - inter-token latency (ITL) p50/p99: gaps between consecutive content chunks, over all
    requests; and TPOT, per request (last - first chunk) / (tokens - 1), p50.
  - request errors (HTTP status, connection, in-stream error, timeout).

Prompts are distinct per request and start with a per-run tag (--prompt-tag), so a server's
prompt cache does not carry over between runs; TTFT then includes the real prefill.

Examples:
  .deps/llama.cpp/bin/llama-server -m models/smollm2-135m-instruct-q4_1.gguf -np 16 -c 16384 \
      --host 127.0.0.1 --port 8091 -t 2          # scripts/build_llama_cpp.sh builds it
  python3 scripts/loadtest.py --url http://127.0.0.1:8091 -c 16 -n 128
  python3 scripts/loadtest.py --url http://127.0.0.1:8080 -c 16 -n 128      # lmfuse serve
  python3 scripts/loadtest.py --url http://127.0.0.1:8091 -c 4 -n 64 --prompts 32 --completions --json

Standard library only (http.client + threads). It talks only to --url, which must be a loopback
address unless --allow-remote is given; the whole run is bounded by --timeout (default 600 s).
Exit status: 0 when every request succeeded, 1 when any failed or the run timed out, 2 on bad
arguments.
"""
import argparse
import http.client
import ipaddress
import json
import os
import queue
import socket
import sys
import threading
import time
import urllib.parse

SUBJECTS = ["a lighthouse keeper", "a retired astronaut", "a clockmaker", "a young botanist",
            "a ship's cat", "a chess prodigy", "a desert caravan", "a mountain village",
            "a forgotten library", "an old steam engine", "a beekeeper", "a street musician",
            "a deep-sea diver", "a cartographer", "a night-shift baker", "a volcano observatory"]
TWISTS = ["who finds a map", "during a thunderstorm", "on the last day of winter",
          "after a power outage", "who receives a strange letter", "while the river floods",
          "who loses a key", "at the edge of the world"]


def make_prompt(i, tag):
    """Distinct for every i, and per run (tag), so no two requests share more than the chat
    template's prefix and a server's prompt cache does not carry over from an earlier run."""
    s = SUBJECTS[i % len(SUBJECTS)]
    t = TWISTS[(i // len(SUBJECTS)) % len(TWISTS)]
    return (f"[{tag}] Story {i}: write a long, detailed story about {s} {t}. "
            f"Give every character a name and describe each place carefully.")


def percentile(xs, p):
    """Linear interpolation between closest ranks; None for an empty list."""
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def is_loopback(host):
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0].split("%")[0]).is_loopback
                               for i in infos)


class Target:
    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"--url: expected http://HOST:PORT[/prefix], got '{url}'")
        self.scheme, self.host = u.scheme, u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        # Accept ".../v1" or a bare server root.
        prefix = u.path.rstrip("/")
        self.prefix = prefix[:-3] if prefix.endswith("/v1") else prefix

    def connect(self, timeout):
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout)

    def path(self, p):
        return self.prefix + p


def discover_model(target, timeout):
    """First id of GET /v1/models, or None."""
    try:
        conn = target.connect(timeout)
        conn.request("GET", target.path("/v1/models"))
        r = conn.getresponse()
        body = r.read()
        conn.close()
        if r.status != 200:
            return None
        data = json.loads(body).get("data") or []
        return data[0].get("id") if data else None
    except (OSError, http.client.HTTPException, ValueError):
        return None


class Result:
    __slots__ = ("ok", "error", "start", "first", "end", "gaps", "chunks", "usage_tokens",
                 "prompt_tokens", "finish")

    def __init__(self):
        self.ok, self.error = False, None
        self.start = self.first = self.end = None
        self.gaps, self.chunks = [], 0
        self.usage_tokens = self.prompt_tokens = None
        self.finish = None

    @property
    def tokens(self):
        return self.usage_tokens if self.usage_tokens is not None else self.chunks


def run_one(target, args, model, i, deadline, max_tokens=None):
    res = Result()
    body = {"model": model, "stream": True, "temperature": 0,
            "max_tokens": max_tokens or args.n_tokens}
    if not args.no_usage:
        body["stream_options"] = {"include_usage": True}
    if not args.no_ignore_eos:
        body["ignore_eos"] = True
    if args.completions:
        path = "/v1/completions"
        body["prompt"] = make_prompt(i, args.prompt_tag)
    else:
        path = "/v1/chat/completions"
        body["messages"] = [{"role": "user", "content": make_prompt(i, args.prompt_tag)}]
    payload = json.dumps(body).encode()
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        res.error = "timeout (not started)"
        return res
    conn = None
    try:
        conn = target.connect(timeout=min(remaining, args.request_timeout))
        res.start = time.monotonic()
        conn.request("POST", target.path(path), body=payload,
                     headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        r = conn.getresponse()
        if r.status != 200:
            res.error = f"HTTP {r.status}: {r.read(300).decode(errors='replace').strip()}"
            return res
        last = None
        done = False
        while True:
            if time.monotonic() > deadline:
                res.error = "timeout (total --timeout reached mid-stream)"
                return res
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue  # blank separators, ": keep-alive" comments, "event:" lines
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                break
            try:
                ev = json.loads(data)
            except ValueError:
                res.error = f"bad SSE payload: {data[:120]!r}"
                return res
            if "error" in ev:
                res.error = f"in-stream error: {json.dumps(ev['error'])[:200]}"
                return res
            usage = ev.get("usage")
            if usage and usage.get("completion_tokens") is not None:
                res.usage_tokens = usage["completion_tokens"]
                res.prompt_tokens = usage.get("prompt_tokens")
            for ch in ev.get("choices") or []:
                if args.completions:
                    text = ch.get("text")
                else:
                    # reasoning models stream their thinking separately; it is generated output too
                    delta = ch.get("delta") or {}
                    text = delta.get("content") or delta.get("reasoning_content")
                if text:
                    now = time.monotonic()
                    if res.first is None:
                        res.first = now
                    else:
                        res.gaps.append(now - last)
                    last = now
                    res.chunks += 1
                if ch.get("finish_reason"):
                    res.finish = ch["finish_reason"]
        res.end = time.monotonic()
        if not done and res.finish is None:
            res.error = "stream ended without [DONE] or finish_reason"
        elif res.first is None:
            res.error = "no content chunk received"
        else:
            res.ok = True
    except (OSError, http.client.HTTPException) as e:
        res.error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    finally:
        if res.end is None:
            res.end = time.monotonic()
        if conn is not None:
            conn.close()
    return res


def summarize(results, wall, args, model, timed_out, pending):
    ok = [r for r in results if r.ok]
    errors = [r for r in results if not r.ok]
    toks = sum(r.tokens for r in ok)
    usage = all(r.usage_tokens is not None for r in ok) if ok else False
    ttft = [(r.first - r.start) * 1e3 for r in ok]
    itl = [g * 1e3 for r in ok for g in r.gaps]
    tpot = [sum(r.gaps) * 1e3 / (r.tokens - 1) for r in ok if r.tokens > 1]  # last - first chunk
    e2e = [(r.end - r.start) for r in ok]
    err_kinds = {}
    for r in errors:
        err_kinds[r.error] = err_kinds.get(r.error, 0) + 1
    if pending:
        err_kinds["timeout (never sent)"] = pending
    short = sum(1 for r in ok if r.tokens < args.n_tokens)
    rnd = lambda x, d=2: None if x is None else round(x, d)
    return {
        "url": args.url, "model": model, "prompt_tag": args.prompt_tag,
        "endpoint": "completions" if args.completions else "chat",
        "concurrency": args.concurrency, "max_tokens": args.n_tokens,
        "requests": args.prompts, "ok": len(ok), "errors": len(errors) + pending,
        "error_kinds": err_kinds, "timed_out": timed_out,
        "short_responses": short,
        "token_count_source": "usage" if usage else "chunks",
        "generated_tokens": toks,
        "prompt_tokens": sum(r.prompt_tokens or 0 for r in ok) if usage else None,
        "wall_s": rnd(wall, 3),
        "tokens_per_s": rnd(toks / wall if wall > 0 else 0.0),
        "requests_per_s": rnd(len(ok) / wall if wall > 0 else 0.0, 3),
        "per_request_tokens_per_s_p50": rnd(percentile(
            [r.tokens / (r.end - r.first) for r in ok if r.end > r.first], 50)),
        "ttft_ms": {f"p{p}": rnd(percentile(ttft, p)) for p in (50, 90, 99)},
        "itl_ms": {f"p{p}": rnd(percentile(itl, p)) for p in (50, 99)},
        "tpot_ms_p50": rnd(percentile(tpot, 50)),
        "e2e_s": {f"p{p}": rnd(percentile(e2e, p), 3) for p in (50, 99)},
    }


def print_table(s, out):
    f = lambda v, unit="": "-" if v is None else f"{v}{unit}"
    rows = [
        ("server", f"{s['url']}  model={s['model']}  endpoint={s['endpoint']}"),
        ("load", f"{s['concurrency']} clients, {s['requests']} requests x {s['max_tokens']} tokens"),
        ("requests", f"{s['ok']} ok, {s['errors']} errors, {s['short_responses']} short"
                     + ("  (TIMED OUT)" if s["timed_out"] else "")),
        ("generated", f"{s['generated_tokens']} tokens (counted from {s['token_count_source']})"
                      + (f", {s['prompt_tokens']} prompt tokens" if s["prompt_tokens"] is not None else "")),
        ("wall", f(s["wall_s"], " s")),
        ("aggregate", f"{f(s['tokens_per_s'])} tokens/s, {f(s['requests_per_s'])} requests/s"),
        ("per request", f"{f(s['per_request_tokens_per_s_p50'])} tokens/s p50 after the first token"),
        ("TTFT ms", "  ".join(f"{k} {f(v)}" for k, v in s["ttft_ms"].items())),
        ("ITL ms", "  ".join(f"{k} {f(v)}" for k, v in s["itl_ms"].items())
                   + f"   TPOT p50 {f(s['tpot_ms_p50'])}"),
        ("e2e s", "  ".join(f"{k} {f(v)}" for k, v in s["e2e_s"].items())),
    ]
    w = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{w}}  {v}", file=out)
    for kind, n in s["error_kinds"].items():
        print(f"{'error':<{w}}  {n} x {kind}", file=out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[1:]))
    ap.add_argument("--url", required=True, help="server root, e.g. http://127.0.0.1:8080")
    ap.add_argument("-c", "--concurrency", type=int, default=16, help="concurrent clients (16)")
    ap.add_argument("-n", "--n-tokens", type=int, default=128, help="max_tokens per request (128)")
    ap.add_argument("--prompts", type=int, default=None,
                    help="total requests, each with its own prompt (default: = concurrency)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--chat", action="store_true", help="POST /v1/chat/completions (default)")
    g.add_argument("--completions", action="store_true", help="POST /v1/completions")
    ap.add_argument("--model", default=None, help="model name (default: first of GET /v1/models)")
    ap.add_argument("--json", action="store_true", help="print JSON on stdout (table on stderr)")
    ap.add_argument("--timeout", type=float, default=600.0, help="whole-run limit in s (600)")
    ap.add_argument("--request-timeout", type=float, default=300.0,
                    help="socket timeout per request in s (300)")
    ap.add_argument("--warmup", type=int, default=1,
                    help="untimed 8-token requests sent first, one at a time (1)")
    ap.add_argument("--prompt-tag", default=None,
                    help="text that starts every prompt (default: random per run; fix it to "
                         "repeat a run's exact prompts)")
    ap.add_argument("--no-ignore-eos", action="store_true", help="do not send ignore_eos: true")
    ap.add_argument("--no-usage", action="store_true",
                    help="do not send stream_options.include_usage (count content chunks)")
    ap.add_argument("--allow-remote", action="store_true",
                    help="allow a non-loopback --url (default: loopback only)")
    args = ap.parse_args()
    if args.prompts is None:
        args.prompts = args.concurrency
    if args.prompt_tag is None:
        args.prompt_tag = "run " + os.urandom(4).hex()
    for name in ("concurrency", "n_tokens", "prompts"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')}: expected >= 1, got {getattr(args, name)}")
    if args.timeout <= 0:
        ap.error(f"--timeout: expected > 0, got {args.timeout}")
    try:
        target = Target(args.url)
    except ValueError as e:
        ap.error(str(e))
    if not args.allow_remote and not is_loopback(target.host):
        ap.error(f"--url host '{target.host}' is not a loopback address (pass --allow-remote)")

    deadline = time.monotonic() + args.timeout
    model = args.model or discover_model(target, min(10.0, args.timeout)) or "default"

    for w in range(args.warmup):
        r = run_one(target, args, model, 10_000_000 + w, deadline, max_tokens=8)
        if not r.ok:
            print(f"loadtest: warm-up request failed: {r.error}", file=sys.stderr)
            return 1

    work = queue.Queue()
    for i in range(args.prompts):
        work.put(i)
    results, lock = [], threading.Lock()

    def client():
        while time.monotonic() < deadline:
            try:
                i = work.get_nowait()
            except queue.Empty:
                return
            r = run_one(target, args, model, i, deadline)
            with lock:
                results.append(r)

    t0 = time.monotonic()
    threads = [threading.Thread(target=client, daemon=True)
               for _ in range(min(args.concurrency, args.prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()) + 5.0)
    timed_out = any(t.is_alive() for t in threads) or time.monotonic() > deadline
    with lock:
        done = list(results)
    ends = [r.end for r in done if r.end is not None]
    wall = (max(ends) if ends else time.monotonic()) - t0
    pending = args.prompts - len(done)
    s = summarize(done, wall, args, model, timed_out, pending)
    print_table(s, sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(s))
    return 0 if s["errors"] == 0 and not timed_out else 1


if __name__ == "__main__":
    sys.exit(main())
