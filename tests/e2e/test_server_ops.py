#!/usr/bin/env python3
"""lmfuse serve behind a load balancer, end to end on loopback with the real SmolLM2-135M:
POST /admin/drain (a new request gets 503 + Retry-After + a JSON error while a stream started before
the drain, and one queued before it, finish in full) and /admin/undrain, /health/ready flipping
200 -> 503 -> 200 (draining; a KV cache below --ready-min-kv-free) while /health/live stays 200, the
API key on /admin/* and /load, GET /load's fields against a running and a queued request, the
x-lmfuse-* headers, X-Request-Id (echoed, generated, a bad one replaced, on every endpoint and in the
request log), /v1/models meta limits and lmfuse_build_info in /metrics.
Exits 77 (ctest: skipped) without the openai package or the demo model."""
import http.client, json, os, re, signal, subprocess, sys, threading, time

SRC = os.environ.get("LMFUSE_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXE = os.environ.get("LMFUSE_BIN", os.path.join(SRC, "build", "lmfuse"))
MODEL = os.path.join(SRC, "models", "smollm2-135m-instruct-q4_1.gguf")
try:
    import openai
except ImportError as e:
    print(f"SKIP: the openai package is not installed ({e}; scripts/setup.sh installs it)")
    sys.exit(77)
if not os.path.exists(MODEL):
    print("SKIP: demo model missing (scripts/get-demo-model.sh)")
    sys.exit(77)

failures = []
GENERATED_ID = re.compile(r"^[0-9a-f]{32}$")


def check(name, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + name + (f": {detail}" if detail and not ok else ""), flush=True)
    if not ok:
        failures.append(name)


class Server:
    def __init__(self, *args):
        self.p = subprocess.Popen([EXE, "serve", "-m", MODEL, "--port", "0", "-t", "2", *args],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        if "listening on http://" not in line:
            raise RuntimeError("server did not start: " + line + self.p.stderr.read())
        self.port = int(line.strip().rstrip("/").rsplit(":", 1)[1])
        self.url = f"http://127.0.0.1:{self.port}"
        # The request log goes to stderr: read it as it comes (a full pipe would block the server).
        self.log = []
        threading.Thread(target=lambda: self.log.extend(iter(self.p.stderr.readline, "")), daemon=True).start()

    def raw(self, method, path, body=None, headers=None, timeout=120):
        """(status, headers as a lowercase dict, body text)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
        c.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        r = c.getresponse()
        out = r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode("utf-8", "replace")
        c.close()
        return out

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return None


def is_error(status, headers, body, want_status, code=None):
    try:
        e = json.loads(body)["error"]
        return (status == want_status and "json" in headers.get("content-type", "") and isinstance(e["message"], str)
                and "type" in e and (code is None or e["code"] == code))
    except Exception:
        return False


class Stream(threading.Thread):
    """A raw streaming chat request: the text, whether it ended with [DONE], the usage chunk."""

    def __init__(self, s, key, max_tokens, rid):
        super().__init__(daemon=True)
        self.s, self.key, self.max_tokens, self.rid = s, key, max_tokens, rid
        self.first = threading.Event()
        self.status, self.text, self.done, self.usage, self.reason, self.error = None, "", False, None, None, None

    def run(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.s.port, timeout=120)
            c.request("POST", "/v1/chat/completions", json.dumps({
                "messages": [{"role": "user", "content": "Count from one to one thousand."}], "stream": True,
                "max_tokens": self.max_tokens, "ignore_eos": True, "stream_options": {"include_usage": True}}),
                {"Content-Type": "application/json", "Authorization": "Bearer " + self.key, "X-Request-Id": self.rid})
            r = c.getresponse()
            self.status, self.headers = r.status, {k.lower(): v for k, v in r.getheaders()}
            for line in r:
                line = line.decode().strip()
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    self.done = True
                    break
                ch = json.loads(line[6:])
                if ch.get("usage"):
                    self.usage = ch["usage"]
                for cc in ch.get("choices", []):
                    self.text += cc["delta"].get("content") or ""
                    self.reason = cc.get("finish_reason") or self.reason
                if self.text:
                    self.first.set()
            c.close()
        except Exception as e:  # noqa: BLE001
            self.error = repr(e)
        self.first.set()


def main():
    key = "ops-key-456"
    auth = {"Authorization": "Bearer " + key}
    # One slot and room for two waiting requests: a running stream, a queued one, then the drain.
    s = Server("-np", "1", "--queue", "2", "--api-key", key, "-c", "1024")
    try:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key=key, max_retries=0, timeout=120)
        st, h, body = s.raw("GET", "/health/live")
        check("/health/live: 200 without a key", st == 200 and json.loads(body)["status"] == "live", f"{st} {body}")
        st, h, body = s.raw("GET", "/health/ready")
        check("/health/ready: 200 at start", st == 200 and json.loads(body)["status"] == "ready", f"{st} {body}")
        st, h, body = s.raw("GET", "/health")
        check("/health unchanged", st == 200 and json.loads(body)["status"] == "ok", body)

        for path in ["/admin/drain", "/admin/undrain"]:
            st, h, body = s.raw("POST", path)
            check(f"POST {path} without the key: 401", is_error(st, h, body, 401), f"{st} {body}")
            st, h, body = s.raw("POST", path, None, {"Authorization": "Bearer wrong"})
            check(f"POST {path} with a wrong key: 401", is_error(st, h, body, 401), f"{st} {body}")
        st, h, body = s.raw("GET", "/load")
        check("/load without the key: 401", is_error(st, h, body, 401), f"{st} {body}")
        st, h, body = s.raw("GET", "/health/ready")
        check("a refused drain leaves the replica ready", st == 200, f"{st} {body}")

        st, h, body = s.raw("GET", "/load", None, auth)
        ld = json.loads(body)
        ints = ["queue_length", "max_queue", "active", "max_active", "kv_blocks_free", "kv_blocks_used", "kv_blocks_total",
                "kv_block_size", "tokens_in_flight", "tokens_active", "tokens_queued"]
        check("/load: every field, integers", st == 200 and all(type(ld.get(k)) is int for k in ints)
              and ld["draining"] is False, body)
        check("/load idle: nothing queued or active, every KV block free", ld["queue_length"] == 0 and ld["active"] == 0
              and ld["kv_blocks_free"] == ld["kv_blocks_total"] > 0 and ld["tokens_in_flight"] == 0
              and ld["max_active"] == 1 and ld["max_queue"] == 2, body)
        check("/load's x-lmfuse-* headers", h.get("x-lmfuse-queue") == "0" and h.get("x-lmfuse-kv-free") == str(ld["kv_blocks_free"]),
              str(h))

        m = client.models.list().data[0]
        meta = m.model_extra.get("meta", {}) if m.model_extra else {}
        check("/v1/models meta: max_active, max_queue, n_ctx", meta.get("max_active") == 1 and meta.get("max_queue") == 2
              and meta.get("n_ctx") == 1024 and meta.get("max_tokens") == 1024, str(meta))

        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=4, extra_headers={"X-Request-Id": "req-abc.123"})
        r = raw.parse()
        check("a generation response has x-lmfuse-queue / x-lmfuse-kv-free and echoes X-Request-Id",
              raw.headers.get("x-lmfuse-queue", "").isdigit() and raw.headers.get("x-lmfuse-kv-free", "").isdigit()
              and raw.headers.get("x-request-id") == "req-abc.123" and r.usage.completion_tokens == 4, str(raw.headers))
        raw = client.chat.completions.with_raw_response.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
        check("a generated X-Request-Id when none is sent", GENERATED_ID.match(raw.headers.get("x-request-id", "")) is not None,
              str(raw.headers))

        # X-Request-Id on every endpoint, also errors; a bad one replaced, never a 5xx.
        rid = {"X-Request-Id": "probe-7"}
        for method, path, body, hdrs, want in [
            ("GET", "/health", None, {}, 200), ("GET", "/health/live", None, {}, 200), ("GET", "/health/ready", None, {}, 200),
            ("GET", "/load", None, auth, 200), ("GET", "/metrics", None, auth, 200), ("GET", "/v1/models", None, auth, 200),
            ("POST", "/tokenize", {"content": "hi"}, auth, 200), ("GET", "/no/such/route", None, auth, 404),
            ("POST", "/v1/chat/completions", b'{"messages": [', auth, 400), ("POST", "/v1/completions", {"prompt": "x"}, {}, 401),
        ]:
            st, h, _ = s.raw(method, path, body, {**hdrs, **rid})
            check(f"X-Request-Id echoed: {method} {path} ({want})", st == want and h.get("x-request-id") == "probe-7",
                  f"{st} {h.get('x-request-id')}")
        for name, bad in [("300 characters", "r" * 300), ("10 KB", "x" * 10240), ("a control character", "abc\x01def"),
                          ("an escape sequence", "\x1b[31mred"), ("a space", "two words"), ("non-ASCII", "caf\xe9")]:
            try:
                st, h, body = s.raw("GET", "/health/live", None, {"X-Request-Id": bad})
            except Exception as e:  # noqa: BLE001
                st, h, body = None, {}, repr(e)
            got = h.get("x-request-id", "")
            check(f"an X-Request-Id with {name} is replaced, never a 5xx", st is not None and st < 500 and got != bad
                  and GENERATED_ID.match(got) is not None, f"{st} {got[:60]!r} {body[:120]}")
        check("the server is still ready after the bad ids", s.raw("GET", "/health/ready")[0] == 200)

        # A running stream and a queued one, then the drain.
        a = Stream(s, key, 400, "stream-a")
        a.start()
        a.first.wait(60)
        b = Stream(s, key, 40, "stream-b")
        b.start()
        ld = None
        for _ in range(200):
            ld = json.loads(s.raw("GET", "/load", None, auth)[2])
            if ld["queue_length"] == 1 and ld["active"] == 1:  # the gauges follow the engine's step
                break
            time.sleep(0.01)
        check("/load with one running and one queued request", ld["active"] == 1 and ld["queue_length"] == 1
              and ld["tokens_active"] > 0 and ld["tokens_queued"] > 0 and ld["kv_blocks_used"] > 0
              and ld["kv_blocks_free"] < ld["kv_blocks_total"]
              and ld["tokens_in_flight"] == ld["tokens_active"] + ld["tokens_queued"], str(ld))
        st, h, body = s.raw("POST", "/admin/drain", None, auth)
        dr = json.loads(body) if st == 200 else {}
        check("POST /admin/drain: 200 while a stream runs and one waits", dr.get("draining") is True and dr.get("active") == 1
              and dr.get("queue_length") == 1 and not a.done, f"{st} {body} done={a.done}")
        st, h, body = s.raw("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}, auth)
        check("draining: a new request gets 503, Retry-After and a JSON error", is_error(st, h, body, 503, "draining")
              and h.get("retry-after", "").isdigit() and int(h["retry-after"]) > 0, f"{st} {h} {body}")
        try:
            client.completions.create(model="m", prompt="Hello", max_tokens=2)
            check("draining: the openai client sees a 503", False, "no error")
        except openai.APIStatusError as e:
            check("draining: the openai client sees a 503", e.status_code == 503 and e.response.headers.get("retry-after") is not None,
                  str(e))
        st, h, body = s.raw("GET", "/health/ready")
        check("draining: /health/ready 503 with the reason", st == 503 and "draining" in json.loads(body)["reasons"], f"{st} {body}")
        check("draining: /health/live 200", s.raw("GET", "/health/live")[0] == 200)
        check("draining: /health unchanged (200 until SIGTERM)", s.raw("GET", "/health")[0] == 200)
        st, h, body = s.raw("POST", "/admin/drain", b"not json at all", auth)
        check("a second drain (with a body) is harmless", st == 200 and json.loads(body)["draining"] is True, f"{st} {body}")
        a.join(120)
        b.join(120)
        for name, t, n in [("the stream running at the drain", a, 400), ("the request queued at the drain", b, 40)]:
            check(f"{name} finishes in full", t.error is None and t.status == 200 and t.done and t.reason == "length"
                  and t.usage is not None and t.usage["completion_tokens"] == n, f"{t.error} {t.status} {t.reason} {t.usage}")
        st, h, body = s.raw("GET", "/health/ready")
        check("drained and idle: still not ready", st == 503, body)
        st, h, body = s.raw("POST", "/admin/undrain", None, auth)
        check("POST /admin/undrain: 200", st == 200 and json.loads(body)["draining"] is False, f"{st} {body}")
        check("undrained: /health/ready 200", s.raw("GET", "/health/ready")[0] == 200)
        r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "What is the capital of France?"}],
                                           temperature=0, max_tokens=16)
        check("undrained: requests succeed again", r.choices[0].finish_reason in ("stop", "length") and r.usage.completion_tokens > 0)

        st, h, mt = s.raw("GET", "/metrics", None, auth)
        bi = re.search(r'^lmfuse_build_info\{model="smollm2-135m-instruct-q4_1\.gguf",version="[0-9][^"]*"\} 1$', mt, re.M)
        check("/metrics: lmfuse_build_info{model, version} 1", st == 200 and bi is not None,
              next((l for l in mt.splitlines() if "build_info" in l), mt[:200]))
        val = lambda name: float(next((l.split()[-1] for l in mt.splitlines() if l.startswith(name + " ")), "nan"))
        check("/metrics counts the requests refused while draining", val("lmfuse_requests_draining_total") == 2, mt[:300])
    finally:
        rc = s.stop()
    check("SIGTERM exits 0", rc == 0, str(rc))
    time.sleep(0.2)
    log = "".join(s.log)
    check("the request log names each request with its id", re.search(r"^lmfuse serve: 200 POST /v1/chat/completions [0-9.]+ s id=stream-a ", log, re.M)
          and re.search(r"^lmfuse serve: 503 POST /v1/chat/completions [0-9.]+ s id=[0-9a-f]{32} ", log, re.M)
          and "id=req-abc.123" in log and "\x1b" not in log, log[-1500:])

    # Readiness follows KV headroom: with --ready-min-kv-free 1 every block must be free (or held
    # only by the prefix cache), so a running stream makes the replica not ready.
    s = Server("-np", "1", "-c", "512", "--ready-min-kv-free", "1", "--no-request-log")
    try:
        check("--ready-min-kv-free 1: ready when idle", s.raw("GET", "/health/ready")[0] == 200)
        a = Stream(s, "", 300, "kv")
        a.start()
        a.first.wait(60)
        for _ in range(100):  # the first token can arrive a moment before its step's gauges
            st, h, body = s.raw("GET", "/health/ready")
            if st == 503 or a.done:
                break
            time.sleep(0.02)
        check("a running stream under --ready-min-kv-free 1: 503 kv_cache_full", st == 503 and not a.done
              and json.loads(body)["reasons"] == ["kv_cache_full"], f"{st} {body} done={a.done}")
        a.join(120)
        check("the stream finished", a.done and a.usage is not None and a.usage["completion_tokens"] == 300, str(a.usage))
        st = None
        for _ in range(100):  # the gauges follow the step after the last token
            st, h, body = s.raw("GET", "/health/ready")
            if st == 200:
                break
            time.sleep(0.02)
        check("its blocks back (in the prefix cache): ready again", st == 200, body)
        check("--no-request-log: no request lines", not any(" id=" in l for l in s.log), "".join(s.log)[-500:])
    finally:
        rc = s.stop()
    check("SIGTERM exits 0 (second server)", rc == 0, str(rc))
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
