"""Canary rollouts decided by the router's own analysis, over real `sluice serve` replicas on
loopback: a candidate identical to stable is promoted through every step with its shadow answers
matching stable's exactly at temperature 0; a worse candidate is rolled back by itself, with the
reason, in each of three ways: a different model file (its answers differ: quality, from shadow
traffic), replicas that fail a share of requests (errors), and one made slow (behind a front
that holds each completion request: time to first token). An eval suite gates the analysis steps too, and
the candidate is warmed with the traffic's hottest prompt prefixes before its first step."""

import base64
import concurrent.futures
import http.client
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import sluice_process  # noqa: E402  (tests/sluice_process.py)

BIN = os.environ["SLUICE_BIN"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "..", "shared", "models")
STORIES = os.path.join(MODELS, "stories260K.gguf")
OTHER = os.path.join(MODELS, "quant", "llama-d256-s21-Q8_0.gguf")
KEY = "canary-admin"
ARTIFACTS = os.environ.get("SLUICE_TEST_ARTIFACTS", os.getcwd())
LISTENING = r"listening on (http://[\d.]+:\d+)"
# A sanitized build serves 25 to 45 times slower (tests/clients/answer_tokens.mjs): a quarter of
# the tokens there.
ANSWER_TOKENS = 6 if os.environ.get("SLUICE_SANITIZED") == "1" else 24
NAMES = ["Lily", "Tom", "Ben", "Sue", "Max", "Anna", "Sam", "Mia", "Leo", "Zoe"]


stop = sluice_process.stop


class SlowFront:
    """An HTTP front for a replica that holds each completion request `delay` seconds before
    passing it on, then streams the answer through as it comes: a candidate whose time to first
    token is that much longer on any machine. (Queueing, --max-num-seqs 1 under load, did not
    make the tiny test model slow on a fast CPU: it answers in a few milliseconds.)"""

    def __init__(self, upstream, delay):
        up = urllib.parse.urlsplit(upstream)

        class Relay(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def relay(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                if self.command == "POST" and self.path.startswith("/v1/"):
                    time.sleep(delay)
                conn = http.client.HTTPConnection(up.hostname, up.port, timeout=120)
                skip = ("host", "connection", "content-length", "transfer-encoding")
                conn.request(self.command, self.path, body=body,
                             headers={k: v for k, v in self.headers.items() if k.lower() not in skip})
                r = conn.getresponse()
                self.send_response(r.status)
                for k, v in r.getheaders():
                    if k.lower() not in skip:
                        self.send_header(k, v)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while chunk := r.read1(65536):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                conn.close()

            do_GET = do_POST = relay

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Relay)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class CanaryTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sluice_canary_")
        self.processes = []

    def tearDown(self):
        for p in self.processes:
            stop(p)
        shutil.rmtree(self.dir, ignore_errors=True)

    def serve(self, model, *extra):
        p, url = sluice_process.start(BIN, ["serve", "-m", model, "--port", "0", *extra], LISTENING)
        self.processes.append(p)
        return p, url

    def route(self, backends, *extra):
        self.routers = getattr(self, "routers", 0) + 1
        db = os.path.join(self.dir, f"rollouts-{self.routers}.db")  # a store of its own
        args = ["route", "--port", "0", "--admin-key", KEY, "--rollout-db", db,
                "--policy", "round_robin", *extra]
        for url, version, *key in backends:  # (url, version) or (url, version, its API key)
            args += ["--backend", f"{url},version={version}" + (f",key={key[0]}" if key else "")]
        p, url = sluice_process.start(BIN, args, LISTENING)
        self.processes.append(p)
        return url

    def cli(self, url, group, *args, as_json=False):
        """`sluice route GROUP [--json] ARGS...` against the router at url."""
        r = subprocess.run([BIN, "route", group, "--url", url, *(["--json"] if as_json else []), *args],
                           capture_output=True, text=True,
                           env=dict(os.environ, SLUICE_ADMIN_KEY=KEY), timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r.stdout

    def start_rollout(self, url, spec):
        path = os.path.join(self.dir, "rollout.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        self.cli(url, "rollout", "start", path)

    def current(self, url):
        return json.loads(self.cli(url, "rollout", "status", as_json=True))["current"]

    def request(self, url, i, stream=False):
        body = {"prompt": f"Once upon a time {NAMES[i % len(NAMES)]} saw a {i}", "max_tokens": ANSWER_TOKENS,
                "temperature": 0, "stream": stream}
        req = urllib.request.Request(f"{url}/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json", "X-Session-ID": f"user-{i}"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def drive(self, url, concurrency=1, stream=False, limit=600):
        """Requests until the rollout is promoted or aborted; the final rollout."""
        i = 0
        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            while i < limit:
                list(pool.map(lambda k: self.request(url, k, stream), range(i, i + 4 * concurrency)))
                i += 4 * concurrency
                r = self.current(url)
                if r["phase"] in ("promoted", "aborted"):
                    return r
        return self.current(url)

    def spec(self, **analysis):
        return {"name": "canary", "stable": "v1", "candidate": "v2",
                "steps": [{"setWeight": 20}, {"analysis": {}}, {"setWeight": 50}, {"analysis": {}},
                          {"setWeight": 100}],
                "analysis": {"interval": 0.5, "minRequests": 8, "failureLimit": 0, **analysis}}

    def test_an_identical_candidate_is_promoted_and_its_shadow_answers_match_exactly(self):
        s1, s2, c = (self.serve(STORIES)[1] for _ in range(3))
        url = self.route([(s1, "v1"), (s2, "v1"), (c, "v2")])
        self.start_rollout(url, {**self.spec(minShadowPairs=8), "shadow": {"fraction": 1, "noiseFraction": 0.5}})
        r = self.drive(url)
        self.assertEqual(r["phase"], "promoted", json.dumps(r["decisions"], indent=1))
        actions = [d["action"] for d in r["decisions"]]
        self.assertEqual(actions.count("analysis passed"), 2, actions)
        self.assertEqual(actions[-1], "promote")
        report = json.loads(self.cli(url, "shadow", "report", as_json=True))
        cand, noise = report["arms"]["candidate"], report["arms"]["noise"]
        self.assertGreaterEqual(cand["pairs"], 8, report)
        self.assertEqual(cand["exact_match_rate"], 1.0, report["worst"])
        self.assertEqual(cand["shadow_errors"], 0)
        self.assertGreater(noise["pairs"], 0)
        self.assertEqual(noise["exact_match_rate"], 1.0)
        # The shadow's logprobs on the tokens both sampled: the same model, so no gap at all.
        self.assertEqual(cand["logprob_gap"]["pairs"], 0)  # the clients asked for no logprobs
        text = self.cli(url, "shadow", "report")
        self.assertIn("exact match 100.0%", text)
        # Promoted, v2 answers every client: shadowing it is refused (nothing would be copied);
        # shadowing v1, the report says its pairs and v2's are of two versions.
        r = subprocess.run([BIN, "route", "shadow", "set", "--url", url, "--version", "v2", "--fraction", "1"],
                           capture_output=True, text=True, env=dict(os.environ, SLUICE_ADMIN_KEY=KEY), timeout=60)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("answers every client since the rollout ended", r.stdout + r.stderr)
        self.cli(url, "shadow", "set", "--version", "v1", "--fraction", "1")
        deadline = time.time() + 60
        while time.time() < deadline:
            self.request(url, 0)
            report = json.loads(self.cli(url, "shadow", "report", as_json=True))
            if report["candidate_versions"].get("v1", 0) > 0:
                break
        self.assertIn("v1", report["candidate_versions"], report)
        self.assertIn("the candidate pairs below are of 2 versions (", self.cli(url, "shadow", "report"))

    def test_a_different_model_is_rolled_back_for_its_answers(self):
        s1, s2 = (self.serve(STORIES)[1] for _ in range(2))
        c = self.serve(OTHER)[1]
        url = self.route([(s1, "v1"), (s2, "v1"), (c, "v2")])
        self.start_rollout(url, {**self.spec(minShadowPairs=8), "shadow": {"fraction": 1, "noiseFraction": 0.5}})
        r = self.drive(url)
        self.assertEqual(r["phase"], "aborted", json.dumps(r["decisions"], indent=1))
        self.assertEqual(r["weight"], 0)
        self.assertIn("shadow disagreement", r["decisions"][-1]["reason"])
        report = json.loads(self.cli(url, "shadow", "report", "--worst", "1", as_json=True))
        self.assertLess(report["arms"]["candidate"]["exact_match_rate"], 0.5, report)
        # Aborted, so every session is stable's again: what a client gets through the router is
        # stable's answer (the same at temperature 0 as stable asked directly), never the
        # candidate's, whose copy of the same request differs.
        for i in range(5):
            _, through = self.request(url, i)
            _, direct = self.request(s1, i)
            _, candidate = self.request(c, i)
            answer = lambda body: json.loads(body)["choices"][0]["text"]
            self.assertEqual(answer(through), answer(direct))
            self.assertNotEqual(answer(through), answer(candidate))
        worst = report["worst"][0]
        self.assertNotEqual(worst["primary"]["text"], worst["shadow"]["text"])
        self.assertGreaterEqual(worst["comparison"]["first_diff_token"], 0)

    def test_a_candidate_that_fails_a_share_of_requests_is_rolled_back_for_its_errors(self):
        s1 = self.serve(STORIES)[1]
        c1 = self.serve(STORIES)[1]
        dead, c2 = self.serve(STORIES)
        # One of the candidate's two replicas crashes; the router, told to try one replica a
        # request and never to eject, sends it its share all the same.
        url = self.route([(s1, "v1"), (c1, "v2"), (c2, "v2")], "--max-attempts", "1", "--eject-after", "1000",
                         "--health-interval", "3600")
        stop(dead, signal.SIGKILL)
        self.start_rollout(url, self.spec())
        r = self.drive(url)
        self.assertEqual(r["phase"], "aborted", json.dumps(r["decisions"], indent=1))
        self.assertIn("error rate", r["decisions"][-1]["reason"])

    def test_the_candidate_is_warmed_with_the_hottest_prefixes_before_its_first_step(self):
        prefix = ("Once upon a time there was a little girl named Lily who loved to play in the park with her "
                  "dog Max, and every day they ran after the ball until the sun went down. ")

        def ask(url, i):
            body = {"prompt": prefix + f"One day {NAMES[i % len(NAMES)]}", "max_tokens": 4, "temperature": 0}
            req = urllib.request.Request(f"{url}/v1/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json", "X-Session-ID": f"s{i}"})
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.headers["X-Sluice-Replica"], json.loads(r.read())["usage"]

        cached = {}
        for prefixes in (32, 0):
            s1, c = self.serve(STORIES)[1], self.serve(STORIES)[1]
            url = self.route([(s1, "v1"), (c, "v2")])
            self.start_rollout(url, {"name": "w", "stable": "v1", "candidate": "v2", "warm": {"prefixes": prefixes},
                                     "steps": [{"setWeight": 0}, {"pause": {}}]})
            for i in range(6):
                self.assertEqual(ask(url, i)[0], s1)  # weight 0: all on stable
            self.cli(url, "rollout", "abort")
            self.start_rollout(url, {"name": "w2", "stable": "v1", "candidate": "v2", "warm": {"prefixes": prefixes},
                                     "steps": [{"setWeight": 100}, {"pause": {}}]})
            for _ in range(500):
                if self.current(url)["weight"] == 100:
                    break
                time.sleep(0.01)
            replica, usage = ask(url, 100)
            self.assertEqual(replica, c)
            cached[prefixes] = usage["prompt_tokens_details"]["cached_tokens"]
            actions = [d["action"] for d in self.current(url)["decisions"]]
            self.assertEqual("warm" in actions, prefixes > 0, actions)
            for p in self.processes:
                stop(p)
            self.processes = []
        self.assertGreater(cached[32], 16, cached)  # the shared prefix, whole blocks of it
        self.assertEqual(cached[0], 0, cached)

    def test_an_eval_suite_gates_each_analysis_step(self):
        suite = os.path.join(ROOT, "evals", "stories", "suite.yaml")
        for model, phase in ((STORIES, "promoted"), (OTHER, "aborted")):
            # Replicas that want an API key: the suite reaches each with the key the router has for it.
            s1, c = self.serve(STORIES, "--api-key", "k1")[1], self.serve(model, "--api-key", "k2")[1]
            url = self.route([(s1, "v1", "k1"), (c, "v2", "k2")])
            spec = self.spec(evalSuite=suite)
            self.start_rollout(url, spec)
            r = self.drive(url)
            self.assertEqual(r["phase"], phase, json.dumps(r["decisions"], indent=1))
            evals = [d for d in r["decisions"] if d["reason"].startswith("eval ")]
            self.assertTrue(evals, r["decisions"])
            if phase == "promoted":
                self.assertEqual([d["action"] for d in evals], ["eval passed", "eval passed"])
                self.assertIn("no change", evals[0]["reason"])
            else:
                self.assertEqual(evals[-1]["action"], "analysis failed")
                self.assertIn("regressed", evals[-1]["reason"])
            for p in self.processes:
                stop(p)
            self.processes = []

    def test_the_dashboard_shows_the_live_rollout_and_shadow_pairs_in_a_browser(self):
        s1, s2 = (self.serve(STORIES)[1] for _ in range(2))
        c = self.serve(OTHER)[1]
        url = self.route([(s1, "v1"), (s2, "v1"), (c, "v2")])
        self.start_rollout(url, {**self.spec(minShadowPairs=8), "name": "dash",
                                 "shadow": {"fraction": 1, "noiseFraction": 0.5}})
        self.assertEqual(self.drive(url)["phase"], "aborted")
        # The admin key guards it: no key, a wrong one -> 401 with a Basic challenge.
        for auth in (None, "Basic " + base64.b64encode(b"ops:wrong").decode()):
            req = urllib.request.Request(f"{url}/ui", headers={"Authorization": auth} if auth else {})
            with self.assertRaises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(req, timeout=30)
            self.assertEqual(e.exception.code, 401)
            self.assertIn("Basic", e.exception.headers["WWW-Authenticate"])
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        self.assertIsNotNone(chromium, "chromium is not installed (scripts/setup.sh installs it)")
        browser = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                   f"--user-data-dir={self.dir}/chromium"]
        page = url.replace("http://", f"http://ops:{KEY}@") + "/ui"
        dom = subprocess.run(browser + ["--dump-dom", page], capture_output=True, text=True, timeout=120)
        self.assertIn("<h1>sluice route</h1>", dom.stdout, dom.stderr[-2000:])
        for want in (s1, c, "dash", ">aborted<", "shadow disagreement", "<polyline", "The most differing pairs"):
            self.assertIn(want, dom.stdout)
        shot = os.path.join(ARTIFACTS, "router_dashboard.png")
        r = subprocess.run(browser + [f"--screenshot={shot}", "--window-size=1280,2200", page],
                           capture_output=True, text=True, timeout=120)
        self.assertTrue(os.path.exists(shot) and os.path.getsize(shot) > 10_000, r.stderr[-2000:])
        with open(shot, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_unlabelled_replicas_are_labelled_by_their_model_and_fingerprint(self):
        a, b, c = self.serve(STORIES)[1], self.serve(STORIES)[1], self.serve(OTHER)[1]
        args = ["route", "--port", "0", "--admin-key", KEY, "--health-interval", "0.1"]
        for u in (a, b, c):
            args += ["--backend", u]
        p, url = sluice_process.start(BIN, args, LISTENING)
        self.processes.append(p)
        for _ in range(300):
            req = urllib.request.Request(f"{url}/admin/replicas", headers={"Authorization": f"Bearer {KEY}"})
            with urllib.request.urlopen(req, timeout=30) as r:
                versions = [x["version"] for x in json.loads(r.read())["replicas"]]
            if all(versions):
                break
            time.sleep(0.05)
        self.assertTrue(versions[0].startswith("stories260K@"), versions)
        self.assertEqual(versions[0], versions[1])  # the same file and configuration
        self.assertTrue(versions[2].startswith("llama-d256-s21-Q8_0@"), versions)
        # A reported label names a shadow like any other; a shadow without a version is refused.
        r = subprocess.run([BIN, "route", "shadow", "--url", url, "set", "--fraction", "0.5"], capture_output=True,
                           text=True, env=dict(os.environ, SLUICE_ADMIN_KEY=KEY), timeout=60)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("shadow.version is required", r.stderr)
        self.cli(url, "shadow", "set", "--version", versions[2], "--fraction", "1")
        self.assertIn(f"to {versions[2]}, 100.0% of requests", self.cli(url, "shadow", "status"))

    def test_a_slow_candidate_is_rolled_back_for_its_time_to_first_token(self):
        s1 = self.serve(STORIES)[1]
        front = SlowFront(self.serve(STORIES)[1], delay=0.3)  # 1.5x stable's p95 is the limit
        self.addCleanup(front.close)
        url = self.route([(s1, "v1"), (front.url, "v2")])
        self.start_rollout(url, self.spec(minRequests=16))
        r = self.drive(url, concurrency=8, stream=True)
        self.assertEqual(r["phase"], "aborted", json.dumps(r["decisions"], indent=1))
        self.assertIn("TTFT p95", r["decisions"][-1]["reason"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
