"""Canary rollouts as an operator runs them: two real `sluice serve` replicas labelled v1 and v2,
`sluice route --rollout-db`, and `sluice route rollout start|status|abort`. The router is killed
(SIGKILL) mid-rollout and restarted on the same database: the rollout resumes at the same step
and weight, and every session goes to the same version as before."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import sluice_process  # noqa: E402  (tests/sluice_process.py)

BIN = os.environ["SLUICE_BIN"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "..", "shared", "models", "stories260K.gguf")
KEY = "rollout-admin"


def start(args, pattern):
    return sluice_process.start(BIN, args, pattern)


stop = sluice_process.stop


class RolloutTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sluice_rollout_")
        self.db = os.path.join(self.dir, "rollouts.db")
        self.replicas = [start(["serve", "-m", MODEL, "--port", "0"], r"listening on (http://[\d.]+:\d+)")
                         for _ in range(2)]
        self.router = None

    def tearDown(self):
        for p, _ in self.replicas:
            stop(p)
        if self.router:
            stop(self.router[0])
        shutil.rmtree(self.dir, ignore_errors=True)

    def start_router(self):
        (v1, u1), (v2, u2) = self.replicas
        self.router = start(["route", "--port", "0", "--admin-key", KEY, "--rollout-db", self.db,
                             "--backend", f"{u1},version=v1", "--backend", f"{u2},version=v2"],
                            r"listening on (http://[\d.]+:\d+)")
        return self.router[1]

    def cli(self, url, *args):
        r = subprocess.run([BIN, "route", "rollout", "--url", url, *args], capture_output=True, text=True,
                           env=dict(os.environ, SLUICE_ADMIN_KEY=KEY), timeout=60)
        return r.returncode, r.stdout + r.stderr

    def versions(self, url, n=40):
        """The replica that answers each of n sessions."""
        out = []
        for i in range(n):
            req = urllib.request.Request(f"{url}/v1/completions",
                                         data=json.dumps({"prompt": "Once", "max_tokens": 2}).encode(),
                                         headers={"Content-Type": "application/json", "X-Session-ID": f"user-{i}"})
            with urllib.request.urlopen(req, timeout=60) as r:
                out.append(r.headers["X-Sluice-Replica"])
        return out

    def test_a_rollout_survives_a_killed_router_and_an_abort_sends_everyone_back(self):
        url = self.start_router()
        spec = os.path.join(self.dir, "rollout.yaml")
        with open(spec, "w") as f:
            f.write("name: stories-v2\nstable: v1\ncandidate: v2\nsteps:\n  - setWeight: 40\n  - pause: {}\n")
        rc, out = self.cli(url, "start", spec)
        self.assertEqual(rc, 0, out)
        self.assertIn("paused at step 1, the candidate at 40%", out)
        before = self.versions(url)
        v2 = self.replicas[1][1]
        self.assertTrue(0 < before.count(v2) < len(before), before)
        stop(self.router[0], signal.SIGKILL)  # no chance to save anything more
        url = self.start_router()
        rc, out = self.cli(url, "status")
        self.assertEqual(rc, 0, out)
        self.assertIn("rollout 1 'stories-v2' v1 -> v2: paused at step 1, the candidate at 40%", out)
        # The options may follow the action, and the key may be the router's, before `rollout`.
        r = subprocess.run([BIN, "route", "--admin-key", KEY, "rollout", "status", "--url", url], capture_output=True,
                           text=True, env={k: v for k, v in os.environ.items() if k != "SLUICE_ADMIN_KEY"}, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("paused at step 1, the candidate at 40%", r.stdout)
        self.assertEqual(self.versions(url), before)
        rc, out = self.cli(url, "start", spec)
        self.assertEqual(rc, 1, out)
        self.assertIn("promote or abort it first", out)
        rc, out = self.cli(url, "abort", "--reason", "TTFT looked worse")
        self.assertEqual(rc, 0, out)
        self.assertIn("step 1: abort: TTFT looked worse", out)
        v1 = self.replicas[0][1]
        self.assertEqual(set(self.versions(url)), {v1})
        # A store without the admin key: it starts, and warns that no rollout can be controlled.
        p, warning = start(["route", "--port", "0", "--rollout-db", os.path.join(self.dir, "other.db"),
                            "--backend", f"{v1},version=v1"], r"warning: (--rollout-db without --admin-key)")
        stop(p)
        self.assertEqual(warning, "--rollout-db without --admin-key")
        # --url naming a replica, not the router: said so.
        rc, out = self.cli(v1, "status")
        self.assertEqual(rc, 1, out)
        self.assertIn(f"(is {v1} a router? `sluice serve` has no admin API", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
