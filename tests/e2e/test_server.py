#!/usr/bin/env python3
"""lmfuse serve end to end, on loopback with the real SmolLM2-135M: the official `openai` client
(chat and completions, streaming text = non-streaming text at temperature 0, stop strings, max_tokens,
usage, logprobs), the error cases (status and OpenAI-style body), the API key, 32 concurrent
streams each equal to its prompt served alone, a client that disconnects mid-stream, the queue
bound (429), the prefix cache in /metrics, and SIGTERM during load exiting cleanly.
Exits 77 (ctest: skipped) without the openai package or the demo model."""
import http.client, json, os, signal, subprocess, sys, threading, time

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
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
        c.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        r = c.getresponse()
        out = r.status, r.getheader("Content-Type", ""), r.read().decode("utf-8", "replace")
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


def is_error(status, ctype, body, want_status, needle=""):
    try:
        e = json.loads(body)["error"]
        return (status == want_status and "json" in ctype and isinstance(e["message"], str) and "type" in e
                and needle.lower() in e["message"].lower())
    except Exception:
        return False


def chat(client, text, **kw):
    return client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}], **kw)


def stream_text(client, text, **kw):
    out, reason, usage = "", None, None
    for ch in chat(client, text, stream=True, stream_options={"include_usage": True}, **kw):
        if ch.usage:
            usage = ch.usage
        for c in ch.choices:
            out += c.delta.content or ""
            reason = c.finish_reason or reason
    return out, reason, usage


def main():
    key = "test-key-123"
    s = Server("-np", "8", "--api-key", key, "-c", "1024", "--max-tokens", "256")
    try:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key=key, max_retries=0, timeout=120)
        models = client.models.list()
        check("/v1/models lists the model", len(models.data) == 1 and models.data[0].id.endswith(".gguf"), str(models))

        r = chat(client, "What is the capital of France?", temperature=0, max_tokens=32)
        text = r.choices[0].message.content
        check("chat answers", "Paris" in text and r.choices[0].finish_reason == "stop", text)
        u = r.usage
        check("usage counts add up", u.prompt_tokens > 10 and 0 < u.completion_tokens <= 32
              and u.total_tokens == u.prompt_tokens + u.completion_tokens, str(u))
        st, reason, su = stream_text(client, "What is the capital of France?", temperature=0, max_tokens=32)
        check("streamed text equals the non-streamed text at temperature 0", st == text, f"{st!r} vs {text!r}")
        check("the stream ends with finish_reason and a usage chunk", reason == "stop" and su is not None
              and su.completion_tokens == u.completion_tokens, f"{reason} {su}")
        check("a repeated prompt hits the prefix cache", (su.prompt_tokens_details.cached_tokens or 0) >= 32, str(su))

        r = chat(client, "Write a long story about a dragon.", temperature=0, max_tokens=5)
        check("max_tokens stops with length", r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 5, str(r))
        full = chat(client, "What is the capital of France?", temperature=0, max_tokens=32).choices[0].message.content
        r = chat(client, "What is the capital of France?", temperature=0, max_tokens=32, stop=[" Paris", "zzz"])
        c = r.choices[0].message.content
        check("a stop string ends the text and is never emitted", r.choices[0].finish_reason == "stop" and "Paris" not in c
              and full.startswith(c) and len(c) < len(full), repr(c))
        st, _, _ = stream_text(client, "What is the capital of France?", temperature=0, max_tokens=32, stop=" Paris")
        check("a stop string in a stream", st == c, f"{st!r} vs {c!r}")

        r = chat(client, "Say hello.", temperature=0, max_tokens=6, logprobs=True, top_logprobs=3)
        lp = r.choices[0].logprobs.content
        check("logprobs: one per token, 3 alternatives, the greedy token first", len(lp) == r.usage.completion_tokens
              and all(len(t.top_logprobs) == 3 and t.logprob <= 0 and t.top_logprobs[0].token == t.token for t in lp),
              str(lp[:2]))
        cr = client.completions.create(model="m", prompt="The capital of France is", temperature=0, max_tokens=8, logprobs=2)
        check("completions", cr.object == "text_completion" and len(cr.choices[0].text) > 0
              and len(cr.choices[0].logprobs.tokens) == cr.usage.completion_tokens, str(cr))
        cs = "".join(ch.choices[0].text for ch in client.completions.create(
            model="m", prompt="The capital of France is", temperature=0, max_tokens=8, stream=True) if ch.choices)
        check("streamed completion equals the non-streamed one", cs == cr.choices[0].text, f"{cs!r} vs {cr.choices[0].text!r}")
        r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=3,
                                           extra_body={"some_future_field": {"x": 1}, "ignore_eos": True})
        check("unknown fields are ignored; ignore_eos generates max_tokens", r.usage.completion_tokens == 3, str(r.usage))
        a = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Pick a word."}], temperature=1.0,
                                           seed=42, max_tokens=12).choices[0].message.content
        b = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Pick a word."}], temperature=1.0,
                                           seed=42, max_tokens=12).choices[0].message.content
        check("the same seed samples the same text", a == b, f"{a!r} vs {b!r}")

        q = "Repeat the word apple twenty times."
        plain = chat(client, q, temperature=0, max_tokens=48).choices[0].message.content
        pen = chat(client, q, temperature=0, max_tokens=48, frequency_penalty=1.5).choices[0].message.content
        check("frequency_penalty changes the greedy text", pen != plain, f"{pen!r} vs {plain!r}")
        pst, _, _ = stream_text(client, q, temperature=0, max_tokens=48, frequency_penalty=1.5)
        check("a penalized stream equals the penalized text", pst == pen, f"{pst!r} vs {pen!r}")
        pres = chat(client, q, temperature=0, max_tokens=48, presence_penalty=1.5).choices[0].message.content
        check("presence_penalty changes the greedy text", pres != plain, f"{pres!r} vs {plain!r}")

        auth = {"Authorization": "Bearer " + key}
        st_, ct, body = s.raw("POST", "/tokenize", {"content": "Hello world"}, auth)
        toks = json.loads(body)["tokens"] if st_ == 200 else []
        st_, ct, body = s.raw("POST", "/detokenize", {"tokens": toks}, auth)
        check("tokenize / detokenize round trip", st_ == 200 and json.loads(body)["content"] == "Hello world", body)
        good = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        for name, payload, needle in [
            ("malformed JSON", b'{"messages": [', "not valid JSON"),
            ("a body that is not an object", b'[1, 2]', "JSON object"),
            ("temperature of the wrong type", {**good, "temperature": "hot"}, "temperature"),
            ("temperature out of range", {**good, "temperature": 7}, "temperature"),
            ("an unknown role", {"messages": [{"role": "wizard", "content": "hi"}]}, "unknown role"),
            ("empty messages", {"messages": []}, "messages"),
            ("messages missing", {"max_tokens": 3}, "messages"),
            ("content of the wrong type", {"messages": [{"role": "user", "content": 5}]}, "content"),
            ("n = 2", {**good, "n": 2}, "n = 1"),
            ("max_tokens 0", {**good, "max_tokens": 0}, "max_tokens"),
            ("max_tokens past the cap", {**good, "max_tokens": 100000}, "at most 256"),
            ("an empty stop string", {**good, "stop": [""]}, "stop"),
            ("top_logprobs without logprobs", {**good, "top_logprobs": 2}, "logprobs"),
            ("a prompt longer than the context", {"messages": [{"role": "user", "content": "word " * 3000}]}, "context holds"),
        ]:
            st_, ct, body = s.raw("POST", "/v1/chat/completions", payload, auth)
            check(f"400 for {name}", is_error(st_, ct, body, 400, needle), f"{st_} {body[:200]}")
        st_, ct, body = s.raw("POST", "/v1/completions", {"prompt": ["a", "b"]}, auth)
        check("400 for two prompts", is_error(st_, ct, body, 400, "one prompt"), body)
        st_, ct, body = s.raw("POST", "/v1/chat/completions", good)
        check("401 without the key", is_error(st_, ct, body, 401, "missing API key"), f"{st_} {body}")
        st_, ct, body = s.raw("POST", "/v1/chat/completions", good, {"Authorization": "Bearer nope"})
        check("401 with a wrong key", is_error(st_, ct, body, 401, "invalid API key"), f"{st_} {body}")
        st_, ct, body = s.raw("GET", "/health")
        check("/health needs no key", st_ == 200 and json.loads(body)["status"] == "ok", body)
        st_, ct, body = s.raw("GET", "/v1/nothing", None, auth)
        check("404 has a JSON error", is_error(st_, ct, body, 404), f"{st_} {body}")
        st_, ct, body = s.raw("GET", "/", None)
        check("the chat page is served at /", st_ == 200 and "text/html" in ct and "<title>lmfuse chat</title>" in body, ct)

        # 32 concurrent streams with different prompts: each equals the prompt served alone.
        prompts = [f"Tell me one fact about the number {i}." for i in range(32)]
        alone = [chat(client, p, temperature=0, max_tokens=24).choices[0].message.content for p in prompts]
        got = [None] * 32
        errs = []

        def worker(i):
            try:
                got[i] = stream_text(client, prompts[i], temperature=0, max_tokens=24)[0]
            except Exception as e:  # noqa: BLE001
                errs.append(f"{i}: {e}")

        th = [threading.Thread(target=worker, args=(i,)) for i in range(32)]
        t0 = time.time()
        for t in th:
            t.start()
        for t in th:
            t.join(timeout=300)
        dt = time.time() - t0
        same = sum(g == a for g, a in zip(got, alone))
        check("32 concurrent streams each equal their prompt served alone", same == 32 and not errs,
              f"{same}/32 equal, errors {errs[:3]}, first difference "
              + next((f"{g!r} vs {a!r}" for g, a in zip(got, alone) if g != a), ""))
        print(f"32 streams x 24 tokens in {dt:.1f} s")

        # A client that goes away mid-stream: its sequence is cancelled, the server goes on.
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        c.request("POST", "/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "Count to 1000."}],
                  "stream": True, "max_tokens": 200, "ignore_eos": True}), {"Content-Type": "application/json", **auth})
        resp = c.getresponse()
        resp.read1(200) if hasattr(resp, "read1") else resp.read(200)
        c.sock.close()
        c.close()
        time.sleep(1.5)
        r = chat(client, "What is the capital of France?", temperature=0, max_tokens=32)
        check("the server answers after a client disconnected mid-stream", r.choices[0].message.content == text)
        st_, ct, m = s.raw("GET", "/metrics", None, auth)
        val = lambda name: float(next((l.split()[-1] for l in m.splitlines() if l.startswith(name + " ")), "nan"))
        check("/metrics counts the cancelled stream", val("lmfuse_requests_cancelled_total") >= 1, m[:300])
        check("/metrics reports requests, tokens, KV blocks and the prefix cache hit rate",
              val("lmfuse_requests_total") > 40 and val("lmfuse_completion_tokens_total") > 500
              and val("lmfuse_kv_blocks_total") > 0 and 0 < val("lmfuse_prefix_cache_hit_rate") <= 1
              and "lmfuse_time_to_first_token_seconds_bucket" in m, m[:500])
    finally:
        rc = s.stop()
    check("SIGTERM with nothing running exits 0", rc == 0, str(rc))

    # The queue bound, the body limit, and SIGTERM during load.
    s = Server("-np", "1", "--queue", "1", "--max-body", "4096", "-c", "512")
    try:
        st_, ct, body = s.raw("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 5000}]})
        check("413 for a body past --max-body", is_error(st_, ct, body, 413), f"{st_} {body[:200]}")
        results = []

        def long_req():
            results.append(s.raw("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Count."}],
                                 "max_tokens": 150, "ignore_eos": True}))

        th = [threading.Thread(target=long_req) for _ in range(4)]
        for t in th:
            t.start()
            time.sleep(0.15)
        for t in th:
            t.join(timeout=120)
        codes = sorted(r[0] for r in results)
        check("a full queue answers 429 with a JSON error, the rest finish", codes.count(200) >= 2 and 429 in codes
              and all(is_error(*r, 429) for r in results if r[0] == 429), str(codes))
        # SIGTERM while streams run: they finish (or end with an error event) and the server exits 0.
        # First the queue phase's requests leave the scheduler (their replies can arrive a step
        # before their slot is freed), so both streams get a slot or the queue's one place.
        for _ in range(100):
            m = s.raw("GET", "/metrics")[2]
            if "lmfuse_active_requests 0" in m and "lmfuse_queue_length 0" in m:
                break
            time.sleep(0.05)
        outs = []

        def stream_req():
            outs.append(s.raw("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Count."}],
                              "max_tokens": 60, "ignore_eos": True, "stream": True}))

        th = [threading.Thread(target=stream_req) for _ in range(2)]
        for t in th:  # staggered: the first is admitted before the second takes the queue's one place
            t.start()
            time.sleep(0.4)
        t0 = time.time()
        rc = s.stop(signal.SIGTERM, timeout=40)
        for t in th:
            t.join(timeout=30)
        check("SIGTERM during load exits 0, the running streams end with [DONE]", rc == 0 and len(outs) >= 1
              and all(o[2].rstrip().endswith("data: [DONE]") for o in outs), f"rc {rc}, {[o[2][-80:] for o in outs]}")
        print(f"shutdown took {time.time() - t0:.1f} s")
    finally:
        s.stop(signal.SIGKILL)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
