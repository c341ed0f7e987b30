"""`sluice eval` as a user runs it, against real `sluice serve` processes on stories260K:
baselines and regressions, --if-changed across a chat template change, an unreachable endpoint,
the promptfoo template, and the HTML report rendered in headless Chromium (a screenshot is kept
in $SLUICE_EVAL_ARTIFACTS, default the build folder)."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import sluice_process  # noqa: E402  (tests/sluice_process.py)

BIN = os.environ["SLUICE_BIN"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "..", "shared", "models", "stories260K.gguf")
ARTIFACTS = os.environ.get("SLUICE_EVAL_ARTIFACTS", os.getcwd())


def serve(*extra, model=MODEL):
    p, url = sluice_process.start(BIN, ["serve", "-m", model, "--port", "0", *extra], r"listening on (http://[\d.]+:\d+)")
    return p, url + "/v1"


def scripted_endpoint(delay=0.0, tls_context=None):
    """An OpenAI-style completions endpoint that answers "ok" after `delay` seconds and records
    every prompt but the endpoint probe's; over TLS with `tls_context`."""
    import http.server
    received, lock = [], threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if body["prompt"] != "Hello":  # the endpoint probe
                with lock:
                    received.append(body["prompt"])
                time.sleep(delay)
            reply = json.dumps({"id": "x", "object": "text_completion", "model": "m", "system_fingerprint": "fp-1",
                                "choices": [{"index": 0, "text": "ok", "finish_reason": "stop"}],
                                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            try:
                self.wfile.write(reply)
            except (BrokenPipeError, ConnectionResetError):
                pass  # a client killed on purpose

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.handle_error = lambda *args: None  # refused handshakes and killed clients are the point
    if tls_context:
        server.socket = tls_context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, received, lock


def serve_demo():
    return serve(model="demo")


stop = sluice_process.stop


class EvalTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server, cls.url = serve()

    @classmethod
    def tearDownClass(cls):
        stop(cls.server)

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sluice_eval_")
        self.db = os.path.join(self.dir, "eval.db")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def questions_suite(self, n):
        """A suite of n tests, "question i" each, passing on an answer that contains "ok"."""
        suite = os.path.join(self.dir, "suite.yaml")
        with open(suite, "w") as f:
            f.write("providers: [openai:completion:m]\nprompts: ['{{ q }}']\ntests:\n")
            for i in range(n):
                f.write(f"  - vars: {{q: question {i}}}\n    assert: [{{type: contains, value: ok}}]\n")
        return suite

    def slow_run_under_way(self, n, sent):
        """`eval run` of questions_suite(n) against a scripted endpoint that answers slowly and
        records every prompt, one request at a time, once `sent` prompts have arrived."""
        server, received, lock = scripted_endpoint(delay=0.2)
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        suite = self.questions_suite(n)
        cmd = [BIN, "eval", "--db", self.db, "run", suite, "--base-url", url, "--no-progress", "-j", "1"]
        run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        while time.time() < deadline and len(received) < sent:
            time.sleep(0.01)
        return server, received, lock, suite, url, run

    def eval(self, *args, url=None, env=None):
        cmd = [BIN, "eval", "--db", self.db, *args]
        if args and args[0] == "run":
            cmd += ["--base-url", url or self.url, "--no-progress"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
        return r.returncode, r.stdout + r.stderr

    def test_baseline_then_a_worse_candidate_regresses_and_the_same_config_does_not(self):
        suite = os.path.join(ROOT, "evals", "stories", "suite.yaml")
        rc, out = self.eval("run", suite, "--save-baseline", "main")
        self.assertEqual(rc, 0, out)
        self.assertIn("pass rate 100.0%", out)  # the recorded greedy transcripts, to the letter
        self.assertIn("baseline 'main' is now run 1", out)

        md, html, junit = (os.path.join(self.dir, f) for f in ("r.md", "r.html", "r.xml"))
        # The HTML report through a link to a file not made yet (a validator that created the
        # file to test it once refused such a link).
        os.mkdir(os.path.join(self.dir, "reports"))
        os.symlink(os.path.join("reports", "r.html"), html)
        rc, out = self.eval("run", suite, "--set", "temperature=1.5", "--set", "seed=3", "--baseline", "main",
                            "--markdown", md, "--html", html, "--junit", junit)
        self.assertEqual(rc, 1, out)
        self.assertIn("compare run 2 (candidate) with run 1 (baseline): regressed", out)
        self.assertRegex(out, r"pass rate\s+16\s+100\.0%")
        self.assertIn("pass -> FAIL [stories260K]", out)
        # The unchanged likelihood items are not regressions.
        self.assertRegex(out, r"accuracy cloze\s+8\s+100\.0%\s+100\.0%\s+\+0\.0pp\s+1\.0000\s+mcnemar\s+\S+\s+no change")
        with open(md) as f:
            text = f.read()
        self.assertIn("sluice eval: **regressed**", text)
        self.assertIn("**Regressed items**", text)
        with open(junit) as f:
            self.assertIn("<failure message=\"regressed", f.read())
        # The same candidate with --if-changed matches run 2 and sends nothing, but its gate holds:
        # a failed CI job run again does not turn green.
        rc, out = self.eval("run", suite, "--set", "temperature=1.5", "--set", "seed=3", "--baseline", "main",
                            "--if-changed")
        self.assertEqual(rc, 1, out)
        self.assertIn("unchanged: run 2", out)
        self.assertIn("compare run 2 (candidate) with run 1 (baseline): regressed", out)
        # ... and under any --fail-on, a baseline that shares no item with the run is no evidence.
        other = os.path.join(ROOT, "evals", "api", "suite.yaml")
        rc, out = self.eval("run", other, "--baseline", "main", "--fail-on", "never")
        self.assertEqual(rc, 3, out)
        self.assertIn("no item is in both runs", out)

        # The same configuration, sent again: no change.
        rc, out = self.eval("run", suite, "--no-cache", "--baseline", "main")
        self.assertEqual(rc, 0, out)
        self.assertIn("): no change", out)

        # history lists the suite's three runs (run 3 was the api suite's); compare of runs 1 and 4
        # as A/A has no flaky item.
        rc, out = self.eval("history", suite)
        self.assertEqual(rc, 0, out)
        self.assertEqual(len([l for l in out.splitlines() if re.match(r"\s+\d+\s+20", l)]), 3, out)
        rc, out = self.eval("compare", "1", "4", "--aa", "--json")
        self.assertEqual(rc, 0, out)
        j = json.loads(out)
        self.assertEqual(j["flaky"], 0)
        self.assertEqual(j["noise_floor"], 0)

        # The HTML report in a real browser: it renders, with its charts.
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        self.assertIsNotNone(chromium, "chromium is not installed (scripts/setup.sh installs it)")
        browser = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                   f"--user-data-dir={self.dir}/chromium"]
        dom = subprocess.run(browser + ["--dump-dom", "file://" + html], capture_output=True, text=True, timeout=120)
        self.assertIn('id="verdict" class="regressed"', dom.stdout, dom.stderr[-2000:])
        self.assertIn('<svg xmlns="http://www.w3.org/2000/svg" class="chart" id="history"', dom.stdout)
        # Written by run 2: a pass-rate and a score point for each of runs 1 and 2.
        self.assertEqual(dom.stdout.count('class="point"'), 2 * 2)
        self.assertIn('class="p2f"', dom.stdout)
        shot = os.path.join(ARTIFACTS, "eval_report.png")
        r = subprocess.run(browser + [f"--screenshot={shot}", "--window-size=1000,1600", "file://" + html],
                           capture_output=True, text=True, timeout=120)
        self.assertTrue(os.path.exists(shot) and os.path.getsize(shot) > 10_000, r.stderr[-2000:])
        with open(shot, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_if_changed_skips_until_the_chat_template_changes(self):
        template = os.path.join(self.dir, "template.jinja")
        with open(template, "w") as f:
            f.write("{% for m in messages %}{{ m['content'] }}\n{% endfor %}")
        server, url = serve("--chat-template", template)
        try:
            suite = os.path.join(self.dir, "chat.yaml")
            with open(suite, "w") as f:
                f.write("providers: [{id: 'openai:chat:stories260K', config: {temperature: 0, max_tokens: 8}}]\n"
                        "prompts: ['{{ start }}']\n"
                        "tests: [{vars: {start: Once upon a time}, assert: [{type: length, value: {min: 1}}]}]\n")
            rc, out = self.eval("run", suite, "--if-changed", url=url)
            self.assertEqual(rc, 0, out)
            self.assertIn("run 1 of", out)
            rc, out = self.eval("run", suite, "--if-changed", url=url)
            self.assertEqual(rc, 0, out)
            self.assertIn("unchanged: run 1", out)
        finally:
            stop(server)
        with open(template, "w") as f:
            f.write("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}")
        server, url = serve("--chat-template", template)
        try:
            rc, out = self.eval("run", suite, "--if-changed", url=url)
            self.assertEqual(rc, 0, out)
            self.assertIn("changed since run 1", out)
            self.assertIn("run 2 of", out)
        finally:
            stop(server)

    def test_an_unreachable_endpoint_is_exit_3_not_a_regression(self):
        suite = os.path.join(ROOT, "evals", "api", "suite.yaml")
        rc, out = self.eval("run", suite, "--retries", "1", url="http://127.0.0.1:1/v1")
        self.assertEqual(rc, 3, out)
        self.assertIn("cannot be reached", out)
        rc, out = self.eval("compare", "--baseline", "nothing")
        self.assertEqual(rc, 2, out)
        # A base URL without its /v1 gets 404 from every route: the error suggests the URL.
        rc, out = self.eval("run", suite, url=self.url[:-len("/v1")])
        self.assertEqual(rc, 2, out)
        self.assertIn(f"(an OpenAI base URL ends in /v1: {self.url}?)", out)

    def test_a_hung_endpoint_is_probed_once_not_retried(self):
        import socket
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        accepted = []

        def accept():
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                accepted.append(conn)  # read nothing, answer nothing

        threading.Thread(target=accept, daemon=True).start()
        try:
            suite = os.path.join(ROOT, "evals", "api", "suite.yaml")
            url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
            rc, out = self.eval("run", suite, "--timeout", "1", "--retries", "4", url=url)
            self.assertEqual(rc, 3, out)
            self.assertIn("cannot be reached", out)
            self.assertIn("failed after 1 attempt:", out)
            self.assertEqual(len(accepted), 1, out)
        finally:
            listener.close()
            for c in accepted:
                c.close()

    def test_bad_flags_and_report_files_are_refused_before_any_request(self):
        server, received, lock = scripted_endpoint()
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        try:
            suite = self.questions_suite(2)
            dangling = os.path.join(self.dir, "dangling.html")
            os.symlink(os.path.join(self.dir, "nodir", "r.html"), dangling)
            for args, why in [(["--baseline", "b", "--max-drop", "banana"], "--max-drop 'banana' must be a number"),
                              (["--max-drop", "banana"], "--max-drop 'banana' must be a number"),
                              (["--baseline", "b", "--html", "/nonexistent/r.html"], "/nonexistent"),
                              # A folder that takes no new file (root may write to /proc's, in access()'s view).
                              (["--baseline", "b", "--html", "/proc/r.html"], "'/proc/r.html' cannot be written"),
                              (["--baseline", "b", "--html", dangling], "the folder"),
                              (["--set", "prompt=x"], "'prompt' is set by the run itself"),
                              (["--set", "stream=true"], "'stream' is set by the run itself"),
                              (["--max-drop", "500pp"], "is past 100pp"),
                              # An unset variable in CI would otherwise turn the gate off.
                              (["--baseline", ""], "a baseline must not be empty"),
                              (["--save-baseline", ""], "a baseline name must not be empty"),
                              (["--junit", self.dir], "is a folder, not a file"),
                              (["--markdown", os.path.join(self.dir, "pr.md")], "--markdown and --html report a comparison")]:
                rc, out = self.eval("run", suite, *args, url=url)
                self.assertEqual(rc, 2, f"{args}: {out}")
                self.assertIn(why, out, args)
            # SQLite would open "" as a private temporary store, and the run would vanish.
            for db, why in [("", "an empty file name"), (os.path.join(self.dir, "nodir", "e.db"), "does not exist")]:
                r = subprocess.run([BIN, "eval", "--db", db, "run", suite, "--base-url", url, "--no-progress"],
                                   capture_output=True, text=True, timeout=60)
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertIn(why, r.stderr)
            self.assertEqual(received, [])
        finally:
            server.shutdown()

    def test_the_api_suite_and_the_promptfoo_template_run(self):
        rc, out = self.eval("run", os.path.join(ROOT, "evals", "api", "suite.yaml"))
        self.assertEqual(rc, 0, out)
        self.assertIn("pass rate 100.0%", out)
        template = os.path.join(ROOT, "evals", "templates", "promptfooconfig.yaml")
        rc, out = self.eval("run", template, "--strict")
        self.assertEqual(rc, 0, out)
        self.assertNotIn("not run", out)
        # The template's javascript assertion put back: listed, and its tests fail (a pass rate
        # never counts checks that did not run); --strict refuses the suite.
        with open(template) as f:
            text = f.read().replace("    # - type: javascript\n    #   value:", "    - type: javascript\n      value:")
        self.assertIn("- type: javascript\n", text)
        js = os.path.join(self.dir, "promptfooconfig.yaml")
        with open(js, "w") as f:
            f.write(text)
        rc, out = self.eval("run", js)
        self.assertEqual(rc, 0, out)
        self.assertIn("not run: defaultTest, assertion 1: assertion type 'javascript' is not implemented", out)
        self.assertIn("pass rate 0.0%", out)
        self.assertIn("not-run: defaultTest, assertion 1", out)
        rc, out = self.eval("run", js, "--strict")
        self.assertEqual(rc, 2, out)

    def test_a_wrong_baseline_costs_no_request_and_disjoint_runs_compare_nothing(self):
        api = os.path.join(ROOT, "evals", "api", "suite.yaml")
        rc, out = self.eval("run", api, "--baseline", "nosuch")
        self.assertEqual(rc, 2, out)
        self.assertIn("'nosuch' is neither a baseline name", out)
        # A number JSON cannot hold is refused, not sent as the text "1e400".
        rc, out = self.eval("run", api, "--set", "temperature=1e400")
        self.assertEqual(rc, 2, out)
        self.assertIn("--set 'temperature=1e400': the number is out of range", out)
        rc, out = self.eval("history", api)
        self.assertNotIn("running", out)
        self.assertNotIn("done", out)
        # A suite path that does not exist, with no run stored, is a usage error, not an empty table.
        rc, out = self.eval("history", api + ".typo")
        self.assertEqual(rc, 2, out)
        self.assertIn("does not exist, and no run of it is stored in", out)
        rc, out = self.eval("run", api, "--save-baseline", "api")
        self.assertEqual(rc, 0, out)
        # --db after the command as well as before it.
        r = subprocess.run([BIN, "eval", "history", api, "--db", self.db], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("done", r.stdout)
        rc, out = self.eval("run", os.path.join(ROOT, "evals", "templates", "promptfooconfig.yaml"), "--baseline", "api")
        self.assertEqual(rc, 3, out)
        self.assertIn("no item is in both runs", out)

    def test_the_json_suite_passes_on_the_demo_model(self):
        server, url = serve_demo()
        try:
            rc, out = self.eval("run", os.path.join(ROOT, "evals", "api", "json.yaml"), url=url)
            self.assertEqual(rc, 0, out)
            self.assertIn("pass rate 100.0%", out)
        finally:
            stop(server)

    def test_a_run_killed_midway_resumes_without_resending_finished_requests(self):
        server, received, lock, suite, url, first = self.slow_run_under_way(12, 5)
        try:
            first.kill()  # SIGKILL: no chance to clean up
            first.wait()
            with lock:
                before = list(received)
                received.clear()
            self.assertGreaterEqual(len(before), 5)
            self.assertLess(len(before), 12)
            rc, out = self.eval("run", suite, url=url)
            self.assertEqual(rc, 0, out)
            self.assertIn("pass rate 100.0%", out)
            # Every item was sent, and none that had finished was sent again: at most the one in
            # flight when the first run was killed.
            self.assertEqual(set(before) | set(received), {f"question {i}" for i in range(12)})
            self.assertLessEqual(len(set(before) & set(received)), 1, (before, received))
            self.assertEqual(len(received), len(set(received)))
        finally:
            server.shutdown()
            server.server_close()

    def test_an_endpoint_that_dies_midway_is_given_up_on(self):
        # 60 questions at 0.2 s each; the endpoint goes away after 3. Without giving up, each of
        # the other 57 would wait out its retries (7.5 s each with the default 4: minutes).
        server, received, lock, suite, url, run = self.slow_run_under_way(60, 3)
        server.shutdown()
        server.server_close()  # connections are refused from now on
        start = time.time()
        out, err = run.communicate(timeout=120)
        self.assertEqual(run.returncode, 3, out + err)
        self.assertLess(time.time() - start, 30, out + err)
        self.assertIn("failed 8 requests in a row", out + err)
        self.assertLess(len(received), 10, received)

    def test_a_run_the_endpoint_refuses_is_the_suites_fault(self):
        # stories260K's context is 128 tokens: the prompt is past it, a 400.
        suite = os.path.join(self.dir, "long.yaml")
        with open(suite, "w") as f:
            f.write("providers: [openai:completion:stories260K]\nprompts: ['{{ q }}']\ntests:\n"
                    "  - vars: {q: '" + "word " * 2000 + "'}\n    assert: [{type: contains, value: ok}]\n")
        rc, out = self.eval("run", suite)
        self.assertEqual(rc, 2, out)
        self.assertIn("1 of 1 samples were refused by the endpoint", out)
        self.assertIn("maximum context length", out)

    def test_ctrl_c_stores_the_run_as_interrupted_and_a_rerun_resumes(self):
        server, received, lock, suite, url, first = self.slow_run_under_way(12, 3)
        try:
            first.send_signal(signal.SIGINT)
            out, err = first.communicate(timeout=60)
            self.assertEqual(first.returncode, 130, out + err)
            self.assertIn("is stored as interrupted, ungraded", err)
            with lock:
                sent_first = len(received)
            self.assertLess(sent_first, 12)
            rc, out = self.eval("history", suite)
            self.assertIn("interrupted", out)
            # An interrupted run lacks answers, which would count as fails: it is no baseline.
            for args in [("baseline", "set", "b", "1"), ("compare", "--baseline", "1", "1"),
                         ("run", suite, "--baseline", "1")]:
                rc2, out2 = self.eval(*args, url=url)
                self.assertEqual(rc2, 2, f"{args}: {out2}")
                self.assertIn("run 1 is interrupted, not done", out2)
            # Names a run id or an exported file would shadow, or none.
            for name in ["7", "b.json", ""]:
                rc2, out2 = self.eval("baseline", "set", name, "1")
                self.assertEqual(rc2, 2, out2)
            rc2, out2 = self.eval("run", suite, "--save-baseline", "12", url=url)
            self.assertEqual(rc2, 2, out2)
            self.assertIn("--save-baseline: baseline name '12' would be read as a run id", out2)
            # The columns stay under their headings.
            lines = out.splitlines()
            row = next(line for line in lines if "interrupted" in line)
            self.assertEqual(row.index("interrupted") + len("interrupted  "), lines[0].index("fingerprint"), out)
            rc, out = self.eval("run", suite, url=url)
            self.assertEqual(rc, 0, out)
            self.assertIn("pass rate 100.0%", out)
            with lock:
                self.assertEqual(len(set(received)), 12)
                self.assertEqual(len(received), 12)  # none answered before was sent again
        finally:
            server.shutdown()
            server.server_close()

    def test_ctrl_c_while_a_judge_grades_stores_the_run_as_interrupted(self):
        # The answers come at once; the judge (a chat endpoint giving a JSON verdict) is slow, so
        # the signal lands while grading: the run is stored as interrupted, and a re-run grades
        # from the cache without asking the provider again.
        import http.server
        judged, lock = [], threading.Lock()

        class Judge(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if body.get("max_tokens") != 1:  # not the endpoint probe
                    with lock:
                        judged.append(body["messages"][-1]["content"])
                    time.sleep(0.3)
                verdict = json.dumps({"pass": True, "score": 1, "reason": "fine"})
                reply = json.dumps({"id": "j", "object": "chat.completion", "model": "judge", "system_fingerprint": "fp-j",
                                    "choices": [{"index": 0, "message": {"role": "assistant", "content": verdict},
                                                 "finish_reason": "stop"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                try:
                    self.wfile.write(reply)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args):
                pass

        judge = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Judge)
        threading.Thread(target=judge.serve_forever, daemon=True).start()
        server, received, _ = scripted_endpoint()
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        suite = os.path.join(self.dir, "judged.yaml")
        with open(suite, "w") as f:
            f.write(f"providers: [openai:completion:m]\nprompts: ['{{{{ q }}}}']\n"
                    f"judge: {{id: 'openai:chat:judge', config: {{apiBaseUrl: 'http://127.0.0.1:{judge.server_address[1]}/v1'}}}}\n"
                    "tests:\n")
            for i in range(10):
                # Rubrics of their own: the judge's answers are cached by their prompt.
                f.write(f"  - vars: {{q: question {i}}}\n    assert: [{{type: llm-rubric, value: kind {i}}}]\n")
        cmd = [BIN, "eval", "--db", self.db, "run", suite, "--base-url", url, "--no-progress", "-j", "1"]
        try:
            run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            deadline = time.time() + 60
            while time.time() < deadline and len(judged) < 2:
                time.sleep(0.01)
            self.assertEqual(len(received), 10)  # every answer came before grading began
            run.send_signal(signal.SIGTERM)  # as Ctrl-C, with the status of SIGTERM, 128 + 15
            out, err = run.communicate(timeout=60)
            self.assertEqual(run.returncode, 143, out + err)
            self.assertIn("is stored as interrupted", err)
            with lock:
                self.assertLess(len(judged), 10)
            rc, out = self.eval("history", suite)
            self.assertIn("interrupted", out)
            rc, out = self.eval("run", suite, url=url)
            self.assertEqual(rc, 0, out)
            self.assertIn("pass rate 100.0%", out)
            self.assertEqual(len(received), 10)  # the answers came from the cache
        finally:
            server.shutdown()
            server.server_close()
            judge.shutdown()
            judge.server_close()

    def test_an_https_endpoint_is_reached_with_its_certificate_verified(self):
        import ssl
        cert, key = os.path.join(self.dir, "cert.pem"), os.path.join(self.dir, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost", "-keyout", key, "-out", cert],
                       check=True, capture_output=True)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server, received, _ = scripted_endpoint(tls_context=context)
        port = server.server_address[1]
        suite = os.path.join(self.dir, "suite.yaml")
        with open(suite, "w") as f:
            f.write("providers: [openai:completion:m]\nprompts: ['{{ q }}']\n"
                    "tests:\n  - vars: {q: over tls}\n    assert: [{type: equals, value: ok}]\n")
        trusting = dict(os.environ, SSL_CERT_FILE=cert)
        untrusting = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
        try:
            rc, out = self.eval("run", suite, "--no-cache", url=f"https://localhost:{port}/v1", env=trusting)
            self.assertEqual(rc, 0, out)
            self.assertIn("pass rate 100.0%", out)
            self.assertEqual(received, ["over tls"])
            # A certificate nobody vouches for, and one for another name, are refused: exit 3.
            rc, out = self.eval("run", suite, "--retries", "0", url=f"https://localhost:{port}/v1", env=untrusting)
            self.assertEqual(rc, 3, out)
            self.assertIn("certificate verify failed", out)
            rc, out = self.eval("run", suite, "--retries", "0", url=f"https://127.0.0.1:{port}/v1", env=trusting)
            self.assertEqual(rc, 3, out)
            self.assertIn("certificate verify failed", out)
            self.assertEqual(received, ["over tls"])
        finally:
            server.shutdown()
            server.server_close()

    def test_llm_rubric_asks_a_real_judge_and_records_its_answer(self):
        # The judge is another sluice serve (the demo model) in JSON mode: its answers parse,
        # but a random model's objects carry no verdict, so the items fail saying why, and the
        # judge's own answer and fingerprint are kept with each result.
        judge, judge_url = serve_demo()
        try:
            suite = os.path.join(self.dir, "judged.yaml")
            with open(suite, "w") as f:
                f.write(f"""providers: [{{id: "openai:completion:stories260K", config: {{temperature: 0, max_tokens: 16}}}}]
judge: {{id: "openai:completion:demo", config: {{apiBaseUrl: "{judge_url}", temperature: 0, max_tokens: 300,
         response_format: {{type: json_object}}}}}}
prompts: ["{{{{ start }}}}"]
tests:
  - vars: {{start: "Once upon a time"}}
    assert: [{{type: llm-rubric, value: "The output continues a story."}}]
""")
            rc, out = self.eval("run", suite)
            self.assertEqual(rc, 0, out)
            rc, out = self.eval("show", "1", "--json")
            self.assertEqual(rc, 0, out)
            result = json.loads(out)["results"][0]
            grade = result["grades"]["assertions"][0]
            self.assertEqual(grade["type"], "llm-rubric")
            self.assertFalse(grade["pass"])
            self.assertTrue(grade["judge"]["text"].strip().startswith("{"), grade)
            self.assertTrue(grade["judge"]["system_fingerprint"].startswith("fp_"), grade)
            self.assertNotEqual(grade["judge"]["system_fingerprint"], result["system_fingerprint"])
            self.assertRegex(grade["reason"], "no boolean \"pass\"|not a JSON object")
        finally:
            stop(judge)

    def test_the_ci_templates_use_flags_that_exist(self):
        import yaml
        help_text = subprocess.run([BIN, "eval", "run", "--help"], capture_output=True, text=True).stdout
        serve_help = subprocess.run([BIN, "serve", "--help"], capture_output=True, text=True).stdout
        for name in ("github-actions-eval.yml", "gitlab-ci-eval.yml"):
            path = os.path.join(ROOT, "deploy", "ci", name)
            with open(path) as f:
                text = f.read()
            yaml.safe_load(text)
            for line in text.splitlines():
                for cmd, helps in (("sluice eval run", help_text), ("sluice serve", serve_help)):
                    if cmd in line and not line.lstrip().startswith("#"):
                        for flag in re.findall(r"(--[a-z-]+)", line.split(cmd, 1)[1]):
                            self.assertIn(flag, helps, f"{name}: {flag}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
