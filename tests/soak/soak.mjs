// Soak: a `sluice serve` under mixed clients for a while (on demand: `make soak`, not in CI).
//   SLUICE_BIN=build/release/src/cli/sluice SOAK_SECONDS=600 node tests/soak/soak.mjs
// Clients, CLIENTS of them in parallel, each picking at random per request: valid completions
// and chats (streamed or not), invalid bodies (malformed JSON, numbers past a double's range,
// unknown fields, wrong types), bodies of 100,000 keys, bodies trickled slowly, clients that
// disconnect mid-stream or before the answer, half-closed clients, and streaming clients that
// stop reading. Meanwhile /health is asked every 100 ms and its latency recorded.
// Checks at the end: no crash; every valid request answered; the server's RSS flat (the last
// sample no more than 10% + 16 MiB above the sample at 20% of the run); every KV block free
// (the engine idle, read from /metrics); no response bytes left buffered. Prints the figures as
// JSON and exits 1 if a check fails.
import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";

const BIN = process.env.SLUICE_BIN;
if (!BIN) throw new Error("set SLUICE_BIN to the sluice binary");
const SECONDS = Number(process.env.SOAK_SECONDS ?? 600);
const CLIENTS = Number(process.env.SOAK_CLIENTS ?? 12);

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function start() {
  return new Promise((resolve, reject) => {
    const args = ["serve", "--model", "demo", "--port", "0", "--max-queued-requests", "64", "--max-num-seqs", "8",
                  "--idle-timeout", "2", "--header-timeout", "3", "--max-stream-buffer", "65536",
                  "--max-request-bytes", String(8 << 20)];
    const p = spawn(BIN, args, { stdio: ["ignore", "pipe", "pipe"] });
    let out = "", err = "";
    p.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/listening on http:\/\/([\d.]+):(\d+)/);
      if (m) resolve({ proc: p, host: m[1], port: Number(m[2]), stderr: () => err });
    });
    p.stderr.on("data", (d) => (err = (err + d).slice(-20000)));
    p.on("exit", (code, signal) => reject(new Error(`server exited (${code ?? signal}): ${err}`)));
  });
}

function rssMiB(pid) {
  const m = fs.readFileSync(`/proc/${pid}/status`, "utf8").match(/VmRSS:\s+(\d+) kB/);
  return m ? Number(m[1]) / 1024 : NaN;
}

// One raw HTTP exchange: writes `chunks` (with `gapMs` between them), optionally half-closes,
// reads for at most `readMs` (0: until the server closes), optionally never reads.
function raw(port, chunks, { gapMs = 0, halfClose = false, readMs = 0, noRead = false, abortAfterMs = 0 } = {}) {
  return new Promise((resolve) => {
    const s = net.connect(port, "127.0.0.1");
    let data = "";
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      s.destroy();
      resolve(data);
    };
    s.on("error", finish);
    s.on("close", finish);
    if (noRead) s.pause();
    else s.on("data", (d) => (data += d));
    s.on("connect", async () => {
      for (const c of chunks) {
        if (done) return;
        s.write(c);
        if (gapMs) await sleep(gapMs);
      }
      if (halfClose) s.end();
      if (abortAfterMs) setTimeout(finish, abortAfterMs);
      if (readMs) setTimeout(finish, readMs);
    });
    setTimeout(finish, 60000);
  });
}

const post = (path, body, extra = "") =>
  `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${extra}Connection: close\r\n\r\n${body}`;

const prompt = () => "the quick brown fox ".repeat(1 + Math.floor(Math.random() * 20));
const chat = (extra = {}) => JSON.stringify({ messages: [{ role: "user", content: prompt() }], max_tokens: 1 + Math.floor(Math.random() * 48), ...extra });
const completion = (extra = {}) => JSON.stringify({ prompt: prompt(), max_tokens: 1 + Math.floor(Math.random() * 48), ...extra });
const manyKeys = (() => {
  let s = '{"prompt": "x", "chat_template_kwargs": {';
  for (let i = 0; i < 100000; i++) s += `${i ? "," : ""}"k${i}":${i}`;
  return s + "}}";
})();

const stats = { valid: 0, valid_ok: 0, valid_bad: [], invalid: 0, invalid_4xx: 0, slow: 0, slow_ok: 0, disconnects: 0,
                half_closed: 0, half_closed_ok: 0, stalled_readers: 0, many_keys: 0, many_keys_answered: 0, overloaded: 0 };

const kinds = [
  ["valid", 30, async (port) => {
    const streamed = Math.random() < 0.5;
    const isChat = Math.random() < 0.5;
    const body = isChat ? chat({ stream: streamed, temperature: 0 }) : completion({ stream: streamed, temperature: 0 });
    const r = await raw(port, [post(isChat ? "/v1/chat/completions" : "/v1/completions", body)]);
    stats.valid++;
    if (r.startsWith("HTTP/1.1 429")) return stats.overloaded++;
    const ok = r.startsWith("HTTP/1.1 200") && (!streamed || r.includes("data: [DONE]"));
    if (ok) stats.valid_ok++;
    else if (stats.valid_bad.length < 5) stats.valid_bad.push(r.slice(0, 300));
  }],
  ["invalid", 20, async (port) => {
    const bodies = ['{"prompt": "x", "max_tokens": 1e400}', "{not json", '{"prompt": "x", "foo": 1}', '{"prompt": 5}',
                    '{"messages": [{"role": "user", "content": "\\ud800"}]}', '{"prompt": "x", "n": 1000}',
                    '{"prompt": "x", "top_p": 1e-300}', "[".repeat(5000), '{"prompt": "x", "guided_json": {}}'];
    const r = await raw(port, [post("/v1/completions", bodies[Math.floor(Math.random() * bodies.length)])]);
    stats.invalid++;
    if (/^HTTP\/1\.1 4\d\d/.test(r)) stats.invalid_4xx++;
  }],
  ["slow", 8, async (port) => {  // a body in 6 pieces, 0.5 s apart: under the 2 s idle timeout
    const req = post("/v1/completions", completion({ max_tokens: 4 }));
    const pieces = [];
    for (let i = 0; i < 6; i++) pieces.push(req.slice((i * req.length) / 6, ((i + 1) * req.length) / 6));
    const r = await raw(port, pieces, { gapMs: 500 });
    stats.slow++;
    if (r.startsWith("HTTP/1.1 200") || r.startsWith("HTTP/1.1 429")) stats.slow_ok++;
  }],
  ["disconnect", 12, async (port) => {
    await raw(port, [post("/v1/completions", completion({ max_tokens: 200, ignore_eos: true, stream: Math.random() < 0.5 }))],
              { abortAfterMs: 50 + Math.random() * 400 });
    stats.disconnects++;
  }],
  ["half_close", 10, async (port) => {
    const streamed = Math.random() < 0.5;
    // The server's probes of a half-closed client come first: interim "100 Continue" responses.
    const r = (await raw(port, [post("/v1/completions", completion({ stream: streamed, max_tokens: 16 }))], { halfClose: true }))
      .replace(/^(HTTP\/1\.1 100 Continue\r\n\r\n)+/, "");
    stats.half_closed++;
    if ((r.startsWith("HTTP/1.1 200") && (!streamed || r.includes("[DONE]"))) || r.startsWith("HTTP/1.1 429")) stats.half_closed_ok++;
  }],
  ["stalled_reader", 4, async (port) => {
    await raw(port, [post("/v1/completions", completion({ max_tokens: 1500, ignore_eos: true, stream: true, logprobs: 5 }))],
              { noRead: true, readMs: 8000 });
    stats.stalled_readers++;
  }],
  ["many_keys", 3, async (port) => {
    const r = await raw(port, [post("/v1/completions", manyKeys)]);
    stats.many_keys++;
    if (r.startsWith("HTTP/1.1 ")) stats.many_keys_answered++;
  }],
];
const totalWeight = kinds.reduce((a, k) => a + k[1], 0);
function pick() {
  let x = Math.random() * totalWeight;
  for (const k of kinds) if ((x -= k[1]) < 0) return k[2];
  return kinds[0][2];
}

async function metricsText(port) {
  const r = await fetch(`http://127.0.0.1:${port}/metrics`);
  return r.text();
}
function metric(text, name, labels = "") {
  for (const line of text.split("\n")) {
    if ((line.startsWith(name + "{") || line.startsWith(name + " ")) && line.includes(labels)) return Number(line.split(" ").pop());
  }
  return NaN;
}

const server = await start();
const { port } = server;
const pid = server.proc.pid;
const t0 = Date.now();
const deadline = t0 + SECONDS * 1000;
const rss = [];
const healthMs = [];
let healthFailures = 0;

const sampler = (async () => {
  while (Date.now() < deadline) {
    rss.push({ t: (Date.now() - t0) / 1000, mib: rssMiB(pid) });
    await sleep(Math.max(1000, (SECONDS * 1000) / 60));
  }
})();
const health = (async () => {
  while (Date.now() < deadline) {
    const t = performance.now();
    try {
      const r = await fetch(`http://127.0.0.1:${port}/health`);
      await r.text();
      if (r.status !== 200) healthFailures++;
    } catch {
      healthFailures++;
    }
    healthMs.push(performance.now() - t);
    await sleep(100);
  }
})();
const workers = Array.from({ length: CLIENTS }, async () => {
  while (Date.now() < deadline) await pick()(port);
});
await Promise.all([...workers, sampler, health]);

// The end: the engine goes idle (stalled readers were cancelled, disconnects freed).
let m = "";
for (let i = 0; i < 600; i++) {
  m = await metricsText(port);
  if (metric(m, "sluice_num_requests_running") === 0 && metric(m, "sluice_num_requests_waiting") === 0 &&
      metric(m, "sluice_kv_cache_blocks", 'state="used"') === 0 && metric(m, "sluice_http_buffered_bytes") === 0) break;
  await sleep(100);
}
rss.push({ t: (Date.now() - t0) / 1000, mib: rssMiB(pid) });
server.proc.kill("SIGTERM");

healthMs.sort((a, b) => a - b);
const at = (q) => healthMs[Math.min(healthMs.length - 1, Math.floor(q * healthMs.length))];
const early = rss[Math.floor(rss.length * 0.2)].mib, last = rss[rss.length - 1].mib;
const report = {
  seconds: SECONDS, clients: CLIENTS, ...stats,
  slow_client_cancels: metric(m, "sluice_http_slow_client_cancels_total"),
  client_disconnects: metric(m, "sluice_http_client_disconnects_total"),
  request_timeouts: metric(m, "sluice_http_request_timeouts_total"),
  kv_blocks_used_at_end: metric(m, "sluice_kv_cache_blocks", 'state="used"'),
  buffered_bytes_at_end: metric(m, "sluice_http_buffered_bytes"),
  rss_mib: { first: rss[0].mib, at_20pct: early, max: Math.max(...rss.map((r) => r.mib)), last },
  health: { probes: healthMs.length, failures: healthFailures, p50_ms: at(0.5), p99_ms: at(0.99), max_ms: healthMs[healthMs.length - 1] },
};
console.log(JSON.stringify(report, null, 2));
const failures = [];
if (stats.valid_ok + stats.overloaded !== stats.valid) failures.push(`valid requests not answered: ${JSON.stringify(stats.valid_bad)}`);
if (stats.invalid_4xx !== stats.invalid) failures.push("an invalid request was not a 4xx");
if (stats.half_closed_ok !== stats.half_closed) failures.push("a half-closed client did not get its answer");
if (stats.slow_ok !== stats.slow) failures.push("a slow upload was cut");
if (stats.many_keys_answered !== stats.many_keys) failures.push("a 100,000-key body was not answered");
if (report.kv_blocks_used_at_end !== 0) failures.push("KV blocks still held at the end");
if (report.buffered_bytes_at_end !== 0) failures.push("response bytes still buffered at the end");
if (healthFailures) failures.push(`${healthFailures} /health probes failed`);
if (last > early * 1.1 + 16) failures.push(`RSS grew from ${early.toFixed(1)} to ${last.toFixed(1)} MiB`);
if (failures.length) {
  console.error("soak: FAILED\n  " + failures.join("\n  ") + "\nserver stderr (tail):\n" + server.stderr().slice(-3000));
  process.exit(1);
}
console.error("soak: passed");
process.exit(0);
