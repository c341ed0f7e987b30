// `sluice route` over real `sluice serve` processes (the demo model) on loopback, with the
// official openai package and fetch. Run by ctest (tests/clients/CMakeLists.txt) as
//   SLUICE_BIN=build/release/src/cli/sluice node --test tests/clients/router.test.mjs
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFile } from "node:child_process";
import { promisify } from "node:util";
import OpenAI from "openai";
import { answerTokens } from "./answer_tokens.mjs";

const BIN = process.env.SLUICE_BIN;
if (!BIN) throw new Error("set SLUICE_BIN to the sluice binary");

const procs = new Set();

function start(args, pattern) {
  return new Promise((resolve, reject) => {
    const p = spawn(BIN, args, { stdio: ["ignore", "pipe", "pipe"] });
    procs.add(p);
    let out = "", err = "";
    const timer = setTimeout(() => reject(new Error(`${args[0]} did not start: ${err}`)), 60000);
    p.stdout.on("data", (d) => {
      out += d;
      const m = out.match(pattern);
      if (m) {
        clearTimeout(timer);
        resolve({ proc: p, url: m[1] });
      }
    });
    p.stderr.on("data", (d) => (err += d));
    p.on("exit", (code) => {
      procs.delete(p);
      clearTimeout(timer);
      reject(new Error(`${args[0]} exited (${code}): ${err}`));  // ignored once it had started
    });
  });
}

const replica = (port = 0) =>
  start(["serve", "--model", "demo", "--port", String(port), "--threads", "1"], /listening on (http:\/\/[\d.]+:\d+)/);
const router = (backends, extra = [], policy = "session") =>
  start(
    ["route", "--port", "0", "--policy", policy, "--health-interval", "0.2", "--health-rise", "1",
      ...backends.flatMap((b) => ["--backend", b]), ...extra],
    /listening on (http:\/\/[\d.]+:\d+)/,
  );

async function replicaOf(base, session) {
  const r = await fetch(`${base}/v1/completions`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Session-ID": session },
    body: JSON.stringify({ prompt: "hello", max_tokens: 2 }),
  });
  assert.equal(r.status, 200, await r.text());
  return r.headers.get("x-sluice-replica");
}

async function waitFor(what, predicate) {
  for (let i = 0; i < 300; i++) {
    if (await predicate()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}

// Samples the router's in-flight count per replica until stopped, and keeps the sample with the
// most requests in flight. Taken while every request of a burst is in flight (none finished yet),
// that sample is what the last admission saw, so the bounded-load cap must hold in it:
// no replica above ceil(1.25 x total / replicas).
function watchInFlight(url) {
  let running = true, peak = [];
  const done = (async () => {
    while (running) {
      const m = await (await fetch(`${url}/metrics`)).text();
      const inFlight = [...m.matchAll(/^sluice_router_backend_in_flight\{[^}]*\} (\d+)$/gm)].map((x) => Number(x[1]));
      const sum = (xs) => xs.reduce((a, b) => a + b, 0);
      if (sum(inFlight) > sum(peak)) peak = inFlight;
      await new Promise((r) => setTimeout(r, 5));
    }
  })();
  return async () => {
    running = false;
    await done;
    const total = peak.reduce((a, b) => a + b, 0);
    return { peak, total, cap: Math.ceil((1.25 * total) / peak.length) };
  };
}

let replicas = [], urls = [], front;

before(async () => {
  replicas = await Promise.all([replica(), replica(), replica()]);
  urls = replicas.map((r) => r.url);
  front = await router(urls);
});

after(() => {
  for (const p of procs) p.kill("SIGKILL");
});

test("the openai package works through the router, whole and streamed", async () => {
  const client = new OpenAI({ baseURL: `${front.url}/v1`, apiKey: "unused" });
  const whole = await client.completions.create({ model: "demo", prompt: "hi", max_tokens: 4 });
  assert.equal(whole.choices[0].finish_reason, "length");
  let text = "";
  const stream = await client.chat.completions.create({
    model: "demo", messages: [{ role: "user", content: "hi" }], max_tokens: 4, stream: true,
  });
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
  assert.ok(text.length > 0);
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), ["demo"]);
});

test("every request of a session lands on one replica, and a second router agrees", async () => {
  const first = {};
  for (let s = 0; s < 24; s++) first[s] = await replicaOf(front.url, `session-${s}`);
  assert.ok(new Set(Object.values(first)).size >= 2, "sessions spread over the replicas");
  for (let s = 0; s < 24; s++) assert.equal(await replicaOf(front.url, `session-${s}`), first[s]);
  // Another router instance (or this one restarted) maps every session alike: no shared state.
  const other = await router(urls);
  for (let s = 0; s < 24; s++) assert.equal(await replicaOf(other.url, `session-${s}`), first[s]);
  other.proc.kill("SIGTERM");
  // A router restarted (the same flags, no state kept) gives every session its replica again.
  front.proc.kill("SIGTERM");
  await new Promise((r) => front.proc.on("exit", r));
  front = await router(urls);
  for (let s = 0; s < 24; s++) assert.equal(await replicaOf(front.url, `session-${s}`), first[s]);
});

test("a client that goes away cancels its request on the replica", async () => {
  const session = "cancel-me";
  const target = await replicaOf(front.url, session);
  const ac = new AbortController();
  const r = await fetch(`${front.url}/v1/completions`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Session-ID": session },
    body: JSON.stringify({ prompt: "hello", max_tokens: 1500, ignore_eos: true, stream: true }),
    signal: ac.signal,
  });
  const reader = r.body.getReader();
  await reader.read();
  ac.abort();
  await waitFor("the replica to abort the request and free its blocks", async () => {
    const m = await (await fetch(`${target}/metrics`)).text();
    return /finished_reason="abort"} [1-9]/.test(m) && /sluice_num_requests_running\{[^}]*\} 0/.test(m);
  });
});

// Bounded load under a skewed key distribution: one session sends half of a burst of 24
// requests; with all of them in flight no replica holds more than ceil(1.25 x average), the hot
// session spills along the ring, and every request completes.
test("one session sending half the traffic stays under the bounded-load cap", async () => {
  const stop = watchInFlight(front.url);
  const replicasOfHot = new Set();
  await Promise.all(Array.from({ length: 24 }, async (_, i) => {
    const r = await fetch(`${front.url}/v1/completions`, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Session-ID": i % 2 === 0 ? "hot" : `cold-${i}` },
      body: JSON.stringify({ prompt: "hello", max_tokens: answerTokens(100), ignore_eos: true }),
    });
    assert.equal(r.status, 200, await r.text());
    if (i % 2 === 0) replicasOfHot.add(r.headers.get("x-sluice-replica"));
  }));
  const { peak, total, cap } = await stop();
  assert.ok(total >= 20, `the burst was in flight together: ${peak}`);
  assert.ok(Math.max(...peak) <= cap, `${peak} in flight, cap ${cap}`);
  assert.ok(replicasOfHot.size >= 2, "the hot session spilled over its ring neighbours");
});

// One system prompt shared by all traffic (vLLM production-stack #957: everything went to one
// replica): cache_aware spreads a burst of it over every replica, none above the bounded-load
// cap, while most prompt tokens still come from the replicas' caches.
test("a prefix every request shares spreads under the load cap and stays cached", async () => {
  const shared = await router(urls, ["--metrics-interval", "0.2"], "cache_aware");
  // The whole workload as one burst (every request in flight at once, long enough that none
  // ends before the last is admitted).
  const stop = watchInFlight(shared.url);
  await promisify(execFile)(BIN, [
    "bench", "--url", shared.url, "--workload", "shared-prefix", "--prefixes", "1", "--questions", "30",
    "--prefix-tokens", "120", "--prompt-tokens", "12", "--output-tokens", String(answerTokens(60)), "--prompt-format", "text",
    "-c", "30", "--seed", "3", "--no-progress",
  ], { timeout: 240000 });
  const { peak, total: inFlight, cap } = await stop();
  assert.ok(inFlight >= 24, `the burst was in flight together: ${peak}`);
  assert.ok(Math.max(...peak) <= cap, `${peak} in flight, cap ${cap}`);
  // The router counts a request once its stream has ended on its side, which may be a moment
  // after the client read the last byte: the counters are read until they hold all 30 (or 5 s).
  let m, perReplica, counts, total;
  for (const deadline = Date.now() + 5000; ;) {
    m = await (await fetch(`${shared.url}/metrics`)).text();
    perReplica = {};
    for (const [, backend, n] of m.matchAll(/^sluice_router_requests_total\{backend="([^"]+)",[^}]*status="200"\} (\d+)$/gm)) {
      perReplica[backend] = (perReplica[backend] ?? 0) + Number(n);
    }
    counts = Object.values(perReplica);
    total = counts.reduce((a, b) => a + b, 0);
    if (total >= 30 || Date.now() > deadline) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.equal(total, 30, m);
  assert.ok(counts.length === urls.length, `spread: ${JSON.stringify(perReplica)}`);
  const sum = (name) => [...m.matchAll(new RegExp(`^${name}\\{[^}]*\\} (\\d+)$`, "gm"))].reduce((a, x) => a + Number(x[1]), 0);
  const hitRate = sum("sluice_router_cached_tokens_total") / sum("sluice_router_prompt_tokens_total");
  assert.ok(hitRate > 0.6, `hit rate ${hitRate}: ${JSON.stringify(perReplica)}`);
  shared.proc.kill("SIGTERM");
});

test("a replica killed mid-load: nothing hangs, its sessions move and come back", async () => {
  // The replica that session-0 lives on dies while 24 requests run, half of them streamed.
  const victimUrl = await replicaOf(front.url, "session-0");
  const victim = replicas[urls.indexOf(victimUrl)];
  const requests = [];
  for (let i = 0; i < 24; i++) {
    const stream = i % 2 === 1;
    requests.push((async () => {
      const r = await fetch(`${front.url}/v1/completions`, {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-Session-ID": `session-${i % 8}` },
        body: JSON.stringify({ prompt: "hello", max_tokens: answerTokens(200), ignore_eos: true, stream }),
        signal: AbortSignal.timeout(120000),  // a hang, not a slow build
      });
      const body = await r.text();
      return { stream, status: r.status, body };
    })());
  }
  // Killed while it has requests running (a fixed wait could miss them on a fast machine).
  await waitFor("the victim to run requests", async () => {
    const m = await (await fetch(`${victimUrl}/metrics`)).text();
    return /sluice_num_requests_running\{[^}]*\} [1-9]/.test(m);
  });
  victim.proc.kill("SIGKILL");
  const results = await Promise.all(requests);
  for (const { stream, status, body } of results) {
    if (!stream) {
      // Not streamed yet, so retried elsewhere: every one completes.
      assert.equal(status, 200, body);
      assert.equal(JSON.parse(body).choices[0].finish_reason, "length");
    } else {
      assert.equal(status, 200, body);
      assert.ok(body.endsWith("data: [DONE]\n\n"), body.slice(-200));
      const finished = body.includes('"finish_reason":"length"') || body.includes('"finish_reason":"error"');
      assert.ok(finished, body.slice(-300));
    }
  }
  // The kill did land mid-load: the router saw the replica fail under requests.
  const m = await (await fetch(`${front.url}/metrics`)).text();
  const failed = m.split("\n").filter((l) => l.startsWith("sluice_router_upstream_errors_total") && l.includes(victimUrl));
  assert.ok(failed.length > 0, m);
  // Its sessions moved...
  const moved = await replicaOf(front.url, "session-0");
  assert.notEqual(moved, victimUrl);
  // ...and come back once it is up again on its port (after the health checks saw it down: a
  // replica seen down and up again starts clean, its ejection for the failures forgotten).
  await waitFor("the health checks to mark it down", async () => {
    const text = await (await fetch(`${front.url}/metrics`)).text();
    return text.includes(`sluice_router_backend_up{backend="${victimUrl}"} 0`);
  });
  const port = Number(new URL(victimUrl).port);
  const back = await replica(port);
  replicas[urls.indexOf(victimUrl)] = back;
  await waitFor("session-0 to return to its replica", async () => (await replicaOf(front.url, "session-0")) === victimUrl);
});
