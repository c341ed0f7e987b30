"""deploy/: the Kubernetes manifests hang together, their flags are flags sluice takes, and every
metric the Grafana dashboard queries is on /metrics of a running sluice serve and sluice route.

Run by ctest (tests/deploy/CMakeLists.txt) as
    SLUICE_BIN=build/release/src/cli/sluice python3 tests/deploy/deploy_test.py
"""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import sluice_process  # noqa: E402  (tests/sluice_process.py)

import yaml

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
KUBE = os.path.join(ROOT, "deploy", "kubernetes")
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "sluice.json")
BIN = os.environ.get("SLUICE_BIN")


def documents():
    docs = {}
    for path in sorted(glob.glob(os.path.join(KUBE, "*.yaml"))):
        if os.path.basename(path) == "kustomization.yaml":
            continue
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if doc:
                    docs[(doc["kind"], doc["metadata"]["name"])] = doc
    return docs


def flag(args, name):
    """The value of --name=V in a container's args, or None."""
    for a in args:
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
    return None


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


class Manifests(unittest.TestCase):
    def setUp(self):
        self.docs = documents()
        self.replicas = self.docs[("Deployment", "sluice-replica")]
        self.router = self.docs[("Deployment", "sluice-router")]
        self.headless = self.docs[("Service", "sluice-replicas")]

    def test_kustomization_lists_every_manifest(self):
        with open(os.path.join(KUBE, "kustomization.yaml")) as f:
            listed = yaml.safe_load(f)["resources"]
        files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(KUBE, "*.yaml")))
        self.assertEqual(sorted(listed + ["kustomization.yaml"]), files)

    def test_probes_and_termination_fit_the_drain(self):
        for deployment, drain_flag in ((self.replicas, "drain-timeout"), (self.router, "drain")):
            pod = deployment["spec"]["template"]["spec"]
            self.assertTrue(selects(deployment["spec"]["selector"]["matchLabels"],
                                    deployment["spec"]["template"]["metadata"]["labels"]))
            (c,) = pod["containers"]
            ports = {p["name"]: p["containerPort"] for p in c["ports"]}
            probe = c["readinessProbe"]["httpGet"]
            self.assertEqual(probe["path"], "/health")
            self.assertIn(probe["port"], ports)
            self.assertEqual(int(flag(c["args"], "port")), ports[probe["port"]])
            self.assertEqual(flag(c["args"], "host"), "0.0.0.0", "listens beyond the pod's loopback")
            pre_stop = c["lifecycle"]["preStop"]["exec"]["command"]
            self.assertEqual(pre_stop[0], "sleep")
            drain = float(flag(c["args"], drain_flag))
            self.assertGreater(pod["terminationGracePeriodSeconds"], float(pre_stop[1]) + drain,
                               f"{deployment['metadata']['name']}: preStop + drain must end before SIGKILL")
            self.assertIn("memory", c["resources"]["limits"])

    def test_router_discovers_the_headless_service(self):
        self.assertEqual(self.headless["spec"]["clusterIP"], "None")
        replica_labels = self.replicas["spec"]["template"]["metadata"]["labels"]
        self.assertTrue(selects(self.headless["spec"]["selector"], replica_labels))
        (port,) = self.headless["spec"]["ports"]
        (c,) = self.router["spec"]["template"]["spec"]["containers"]
        discover = flag(c["args"], "discover")
        self.assertEqual(discover, f"dns:{self.headless['metadata']['name']}.$(POD_NAMESPACE).svc.cluster.local:{port['port']}")
        self.assertIn("POD_NAMESPACE", [e["name"] for e in c["env"]])
        router_service = self.docs[("Service", "sluice")]
        self.assertTrue(selects(router_service["spec"]["selector"], self.router["spec"]["template"]["metadata"]["labels"]))

    def test_service_monitor_scrapes_replicas_and_routers(self):
        monitor = self.docs[("ServiceMonitor", "sluice")]
        (endpoint,) = monitor["spec"]["endpoints"]
        self.assertEqual(endpoint["path"], "/metrics")
        for service in (self.headless, self.docs[("Service", "sluice")]):
            self.assertTrue(selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"]))
            self.assertIn(endpoint["port"], [p["name"] for p in service["spec"]["ports"]])


def get(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.status, r.read().decode()


def start(args, pattern):
    return sluice_process.start(BIN, args, pattern)


def metric_names(exposition):
    """Every family named by a TYPE line, with a histogram's series, and every sample's name."""
    names = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names.add(name)
            if kind == "histogram":
                names.update(name + s for s in ("_bucket", "_sum", "_count"))
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


@unittest.skipIf(not BIN, "set SLUICE_BIN to the sluice binary")
class RunningAsDeployed(unittest.TestCase):
    """A replica and a router with the manifests' own flags (on loopback, the demo model, a small KV
    cache, the headless service's name replaced by localhost), and the dashboard's metrics on them."""

    def test_manifest_flags_start_and_the_dashboard_metrics_exist(self):
        docs = documents()
        (replica,) = docs[("Deployment", "sluice-replica")]["spec"]["template"]["spec"]["containers"]
        (router,) = docs[("Deployment", "sluice-router")]["spec"]["template"]["spec"]["containers"]
        local = {"model": "demo", "host": "127.0.0.1", "port": "0", "kv-cache-memory": "64MiB", "threads": "1"}
        args = [f"--{k}={local[k]}" if (k := a[2:].split("=", 1)[0]) in local else a for a in replica["args"]]
        serve, serve_url = start(args, r"listening on (http://[\d.]+:\d+)")
        procs = [serve]
        try:
            port = serve_url.rsplit(":", 1)[1]
            local = {"host": "127.0.0.1", "port": "0", "discover": f"dns:localhost:{port}", "discover-interval": "0.2"}
            args = [f"--{k}={local[k]}" if (k := a[2:].split("=", 1)[0]) in local else a for a in router["args"]]
            route, route_url = start(args, r"listening on (http://[\d.]+:\d+)")
            procs.append(route)
            for _ in range(300):
                try:
                    if get(route_url + "/health")[0] == 200:
                        break
                except OSError:
                    pass
                time.sleep(0.05)
            for stream in (False, True):
                body = json.dumps({"prompt": "hello", "max_tokens": 4, "stream": stream}).encode()
                req = urllib.request.Request(route_url + "/v1/completions", data=body,
                                             headers={"Content-Type": "application/json", "X-Session-ID": "s"})
                with urllib.request.urlopen(req, timeout=60) as r:
                    self.assertEqual(r.status, 200)
                    r.read()
            have = metric_names(get(serve_url + "/metrics")[1]) | metric_names(get(route_url + "/metrics")[1])
            with open(DASHBOARD) as f:
                dashboard = json.load(f)
            queried = set()
            for panel in dashboard["panels"]:
                for target in panel.get("targets", []):
                    queried.update(re.findall(r"\bsluice_[a-zA-Z0-9_]+", target["expr"]))
            self.assertGreater(len(queried), 30)
            self.assertIn("sluice_router_requests_total", have)
            self.assertEqual(sorted(queried - have), [], "queried by the dashboard, on no /metrics")
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                self.assertEqual(p.wait(timeout=60), 0)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()


if __name__ == "__main__":
    unittest.main(verbosity=2)
