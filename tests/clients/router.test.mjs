// `sluice route` over real `sluice serve` processes (the demo model) on loopback, with the
// official openai package and fetch. Run by ctest (tests/clients/CMakeLists.txt) as
//   SLUICE_BIN=build/release/src/cli/sluice node --test tests/clients/router.test.mjs
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import OpenAI from "openai";

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
    p.on("exit", () => procs.delete(p));
  });
}

const replica = (port = 0) =>
  start(["serve", "--model", "demo", "--port", String(port), "--threads", "1"], /listening on (http:\/\/[\d.]+:\d+)/);
const router = (backends, extra = []) =>
  start(
    ["route", "--port", "0", "--policy", "session", "--health-interval", "0.2", "--health-rise", "1",
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
        body: JSON.stringify({ prompt: "hello", max_tokens: 200, ignore_eos: true, stream }),
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
