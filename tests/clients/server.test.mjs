// Real clients against a real `sluice serve` process: the official openai package, Node's
// fetch, curl and promtool. Run by ctest (tests/clients/CMakeLists.txt) as
//   SLUICE_BIN=build/release/src/cli/sluice node --test tests/clients/server.test.mjs
// The server runs the built-in demo model (random weights): texts are gibberish, but every
// comparison below is exact, since greedy output does not depend on the batch (DESIGN.md).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import OpenAI from "openai";
import { answerTokens } from "./answer_tokens.mjs";

const BIN = process.env.SLUICE_BIN;
if (!BIN) throw new Error("set SLUICE_BIN to the sluice binary");
const API_KEY = "test-key-123";

let server, base, client;
let serverStderr = "";

function startServer(args) {
  return new Promise((resolve, reject) => {
    const p = spawn(BIN, ["serve", "--model", "demo", "--port", "0", ...args], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    const timer = setTimeout(() => reject(new Error("server did not start: " + serverStderr)), 60000);
    p.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/[\d.]+:\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ proc: p, url: m[1] });
      }
    });
    p.stderr.on("data", (d) => (serverStderr += d));
    p.on("exit", (code) => reject(new Error(`server exited with ${code}: ${serverStderr}`)));
  });
}

async function metrics() {
  const r = await fetch(`${base}/metrics`);
  assert.equal(r.status, 200);
  return r.text();
}

function metricValue(text, name, labels = "") {
  for (const line of text.split("\n")) {
    if ((line.startsWith(name + "{") || line.startsWith(name + " ")) && line.includes(labels)) {
      return Number(line.split(" ").pop());
    }
  }
  return undefined;
}

// Every KV block is either free or kept for the prefix cache: none is held by a request.
async function waitAllBlocksFree() {
  for (let i = 0; i < 200; i++) {
    const m = await metrics();
    const used = metricValue(m, "sluice_kv_cache_blocks", 'state="used"');
    const running = metricValue(m, "sluice_num_requests_running");
    const waiting = metricValue(m, "sluice_num_requests_waiting");
    if (used === 0 && running === 0 && waiting === 0) {
      const free = metricValue(m, "sluice_kv_cache_blocks", 'state="free"');
      const cached = metricValue(m, "sluice_kv_cache_blocks", 'state="cached"');
      assert.equal(free + cached, metricValue(m, "sluice_kv_cache_capacity_blocks"));
      return;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail("KV blocks still held after the requests ended:\n" + (await metrics()));
}

before(async () => {
  const s = await startServer(["--api-key", API_KEY, "--max-num-seqs", "16", "--max-queued-requests", "64",
                               "--max-request-bytes", "65536", "--served-model-name", "tiny",
                               "--drain-timeout", "600"]);
  server = s.proc;
  base = s.url;
  client = new OpenAI({ baseURL: `${base}/v1`, apiKey: API_KEY, maxRetries: 0 });
});

after(async () => {
  if (server && server.exitCode === null) {
    server.kill("SIGTERM");
    await new Promise((r) => server.on("exit", r));
  }
});

async function streamText(stream) {
  let text = "";
  let usage;
  let finish;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta?.content ?? c.text ?? "";
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, usage, finish };
}

test("models lists the served name", async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), ["tiny"]);
});

test("chat: streaming and non-streaming give the same text at temperature 0", async () => {
  const messages = [{ role: "system", content: "Be brief." }, { role: "user", content: "Name three rivers." }];
  const full = await client.chat.completions.create({ model: "tiny", messages, max_tokens: 24, temperature: 0 });
  assert.equal(full.object, "chat.completion");
  assert.equal(full.choices[0].message.role, "assistant");
  assert.equal(full.usage.completion_tokens, 24);
  assert.equal(full.usage.total_tokens, full.usage.prompt_tokens + 24);
  assert.ok(full.system_fingerprint.startsWith("fp_"));
  const streamed = await streamText(await client.chat.completions.create({
    model: "tiny", messages, max_tokens: 24, temperature: 0, stream: true, stream_options: { include_usage: true },
  }));
  assert.equal(streamed.text, full.choices[0].message.content);
  assert.equal(streamed.finish, "length");
  assert.equal(streamed.usage.completion_tokens, 24);
  // The second request found the first one's prompt in the prefix cache.
  assert.ok(streamed.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(streamed.usage));
});

test("completions: streaming and non-streaming give the same text, with logprobs", async () => {
  const req = { model: "tiny", prompt: "Once upon a time", max_tokens: 20, temperature: 0, logprobs: 2 };
  const full = await client.completions.create(req);
  assert.equal(full.object, "text_completion");
  const lp = full.choices[0].logprobs;
  assert.equal(lp.tokens.length, 20);
  assert.equal(lp.token_logprobs.length, 20);
  assert.equal(Object.keys(lp.top_logprobs[0]).length, 2);
  assert.ok(lp.token_logprobs.every((x) => x <= 0));
  const streamed = await streamText(await client.completions.create({ ...req, stream: true }));
  assert.equal(streamed.text, full.choices[0].text);
});

test("completions: a list of prompts with n choices each, token prompts, seeds", async () => {
  const r = await client.completions.create({
    model: "tiny", prompt: ["one", [1, 2, 3]], n: 2, max_tokens: 5, temperature: 0.8, seed: 7,
  });
  assert.equal(r.choices.length, 4);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
  const again = await client.completions.create({
    model: "tiny", prompt: ["one", [1, 2, 3]], n: 2, max_tokens: 5, temperature: 0.8, seed: 7,
  });
  assert.deepEqual(again.choices.map((c) => c.text), r.choices.map((c) => c.text));
});

test("1 and 32 concurrent clients get identical text", async () => {
  const prompts = Array.from({ length: 32 }, (_, i) => `Request number ${i} says`);
  const alone = [];
  for (const p of prompts.slice(0, 6)) {
    alone.push((await client.completions.create({ prompt: p, max_tokens: 16, temperature: 0 })).choices[0].text);
  }
  const together = await Promise.all(prompts.map(async (p, i) => {
    const stream = i % 2 === 0;
    const r = await client.completions.create({ prompt: p, max_tokens: 16, temperature: 0, stream });
    return stream ? (await streamText(r)).text : r.choices[0].text;
  }));
  assert.deepEqual(together.slice(0, 6), alone);
  await waitAllBlocksFree();
});

test("32 streaming clients, a third disconnect mid-stream: the rest complete and every block is freed", async () => {
  const before = metricValue(await metrics(), "sluice_http_client_disconnects_total");
  const results = await Promise.all(Array.from({ length: 32 }, async (_, i) => {
    const controller = new AbortController();
    const stream = await client.chat.completions.create(
      { messages: [{ role: "user", content: `story ${i}` }], max_tokens: answerTokens(96), temperature: 0, stream: true,
        ignore_eos: true },
      { signal: controller.signal });
    let chunks = 0;
    let finish;
    try {
      for await (const chunk of stream) {
        finish = chunk.choices[0]?.finish_reason ?? finish;
        if (i % 3 === 0 && ++chunks === 3) controller.abort();
      }
    } catch (e) {
      if (i % 3 !== 0) throw e;
    }
    return finish;
  }));
  results.forEach((finish, i) => {
    assert.equal(finish, i % 3 === 0 ? undefined : "length", `client ${i}`);
  });
  const health = await fetch(`${base}/health`);
  assert.equal(health.status, 200);
  await waitAllBlocksFree();
  const m = await metrics();
  assert.equal(metricValue(m, "sluice_http_client_disconnects_total") - before, 11);
});

// [what is sent, expected status, a piece of the expected message]
const badRequests = [
  ["/v1/completions", "{not json", 400, "not valid JSON"],
  ["/v1/completions", "[1,2]", 400, "must be a JSON object"],
  ["/v1/completions", "{}", 400, "'prompt' is required"],
  ["/v1/completions", '{"prompt": 5}', 400, "'prompt' must be a string"],
  ["/v1/completions", '{"prompt": "x", "max_tokens": "ten"}', 400, "'max_tokens' must be an integer, got string"],
  ["/v1/completions", '{"prompt": "x", "max_tokens": 0}', 400, "'max_tokens' must be in [1,"],
  ["/v1/completions", '{"prompt": "x", "temperature": 3}', 400, "'temperature' must be in [0, 2], got 3"],
  ["/v1/completions", '{"prompt": "x", "top_p": 0}', 400, "'top_p' must be in (0, 1]"],
  ["/v1/completions", '{"prompt": "x", "n": 0}', 400, "'n' must be in [1, 128]"],
  ["/v1/completions", '{"prompt": "x", "logprobs": 21}', 400, "'logprobs' must be in [0, 20]"],
  ["/v1/completions", '{"prompt": "x", "stop": [1]}', 400, "'stop' must be a string or an array of strings"],
  ["/v1/completions", '{"prompt": "x", "stream_options": {"include_usage": true}}', 400, "only allowed when 'stream' is true"],
  ["/v1/completions", '{"prompt": [99999999]}', 400, "outside the vocabulary"],
  ["/v1/completions", '{"prompt": "x", "echo": 1}', 400, "'echo' must be a boolean"],
  ["/v1/completions", '{"prompt": "x", "suffix": "y"}', 400, "'suffix' is not supported"],
  ["/v1/completions", '{"prompt": "x", "model": "gpt-4"}', 404, "The model 'gpt-4' does not exist"],
  ["/v1/completions", JSON.stringify({ prompt: "x ".repeat(3000) }), 400, "maximum context length is 2048 tokens, but the prompt has"],
  ["/v1/completions", '{"prompt": "x", "max_tokens": 5000}', 400, "tokens were requested"],
  ["/v1/chat/completions", '{"messages": []}', 400, "'messages' must not be empty"],
  ["/v1/chat/completions", '{"messages": [{"content": "hi"}]}', 400, "'messages[0].role' must be a non-empty string"],
  ["/v1/chat/completions", '{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}', 400, "only text content"],
  ["/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 3}', 400, "needs 'logprobs'"],
  ["/v1/nothing", "{}", 404, "no route POST /v1/nothing"],
  ["/tokenize", '{"prompt": "a", "messages": []}', 400, "exactly one of"],
  ["/detokenize", '{"tokens": [-1]}', 400, "non-negative integer"],
];

test("bad requests get the right status and message", async () => {
  for (const [path, body, status, message] of badRequests) {
    const r = await fetch(`${base}${path}`, {
      method: "POST", body, headers: { "Content-Type": "application/json", Authorization: `Bearer ${API_KEY}` },
    });
    const j = await r.json();
    assert.equal(r.status, status, `${path} ${body.slice(0, 80)}: ${JSON.stringify(j)}`);
    assert.ok(j.error.message.includes(message), `${path} ${body.slice(0, 80)}: got "${j.error.message}"`);
    assert.equal(typeof j.error.type, "string");
  }
  const wrongMethod = await fetch(`${base}/v1/completions`, { headers: { Authorization: `Bearer ${API_KEY}` } });
  assert.equal(wrongMethod.status, 405);
  assert.equal(wrongMethod.headers.get("allow"), "POST");
});

test("API key: missing and wrong keys get 401; health and metrics stay open", async () => {
  const none = await fetch(`${base}/v1/models`);
  assert.equal(none.status, 401);
  assert.match((await none.json()).error.message, /missing API key/);
  const wrong = await fetch(`${base}/v1/models`, { headers: { Authorization: "Bearer nope" } });
  assert.equal(wrong.status, 401);
  assert.equal((await wrong.json()).error.message, "invalid API key");
  const sdk = new OpenAI({ baseURL: `${base}/v1`, apiKey: "nope", maxRetries: 0 });
  await assert.rejects(sdk.models.list(), (e) => e.status === 401);
  assert.equal((await fetch(`${base}/health`)).status, 200);
});

test("fetch: a body over --max-request-bytes, sent whole at once, still gets its 413", async () => {
  const r = await fetch(`${base}/v1/completions`, {
    method: "POST", body: JSON.stringify({ prompt: "y".repeat(300000) }),
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${API_KEY}` },
  });
  assert.equal(r.status, 413);
  assert.match((await r.json()).error.message, /over the limit of 65536 bytes/);
});

test("curl: a body over --max-request-bytes gets 413; tokenize round-trips", () => {
  const big = "x".repeat(70000);
  const out = execFileSync("curl", ["-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", `Authorization: Bearer ${API_KEY}`,
                                    "-H", "Content-Type: application/json", "--data-binary", `{"prompt": "${big}"}`,
                                    `${base}/v1/completions`]).toString();
  assert.equal(out, "413");
  const tok = JSON.parse(execFileSync("curl", ["-s", "-H", `Authorization: Bearer ${API_KEY}`, "-d",
                                               '{"prompt": "hello world"}', `${base}/tokenize`]).toString());
  assert.equal(tok.count, tok.tokens.length);
  const detok = JSON.parse(execFileSync("curl", ["-s", "-H", `Authorization: Bearer ${API_KEY}`, "-d",
                                                 JSON.stringify({ tokens: tok.tokens }), `${base}/detokenize`]).toString());
  assert.equal(detok.prompt, "hello world");
});

test("curl: streaming completion ends with [DONE]", () => {
  const out = execFileSync("curl", ["-sN", "-H", `Authorization: Bearer ${API_KEY}`, "-d",
                                    '{"prompt": "abc", "max_tokens": 4, "stream": true, "temperature": 0}',
                                    `${base}/v1/completions`]).toString();
  const events = out.split("\n\n").filter((e) => e.startsWith("data: "));
  assert.equal(events.at(-1), "data: [DONE]");
  assert.equal(JSON.parse(events.at(-2).slice(6)).choices[0].finish_reason, "length");
});

test("promtool accepts /metrics", async () => {
  const text = await metrics();
  for (const name of ["sluice_prefix_cache_queries_total", "sluice_prefix_cache_hits_total",
                      "sluice_time_to_first_token_seconds_bucket", "sluice_num_preemptions_total",
                      "sluice_requests_coalesced_total", "sluice_e2e_request_latency_seconds_count"]) {
    assert.ok(text.includes(name), name);
  }
  assert.ok(metricValue(text, "sluice_prefix_cache_hits_total") > 0);
  execFileSync("promtool", ["check", "metrics"], { input: text });  // throws on a non-zero exit
});

test("sluice bench against this server: every request ok, exact token counts, cache hits from usage", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-bench-"));
  const json = path.join(dir, "run.json");
  execFileSync(BIN, ["bench", "--url", base, "--api-key", API_KEY, "--workload", "shared-prefix", "--prefixes", "2",
                     "--questions", "6", "--prefix-tokens", "64", "--prompt-tokens", "8", "--output-tokens", "8",
                     "--token-range", "3:500", "-c", "4", "--json", json, "--svg", path.join(dir, "run.svg"),
                     "--no-progress"]);
  const report = JSON.parse(fs.readFileSync(json, "utf8"));
  assert.equal(report.summary.num_ok, 12, JSON.stringify(report.summary.errors));
  assert.equal(report.summary.output_tokens, 96);
  const requests = report.requests;
  assert.equal(requests.length, 12);
  assert.ok(requests.every((r) => r.ok && r.output_tokens === 8), JSON.stringify(requests[0]));
  // 2 prefixes x 6 questions: after the first question of each, the 64-token prefix is cached.
  const cached = requests.reduce((a, r) => a + r.cached_tokens, 0);
  assert.ok(cached >= 10 * 64 - 10 * 16, `cached ${cached}`);
  fs.rmSync(dir, { recursive: true });
});

test("SIGTERM: in-flight requests finish, then the server exits cleanly", async () => {
  // The signal goes out once the request is under way (its first chunk arrived).
  const n = answerTokens(300);
  const stream = await client.completions.create({
    prompt: "last one", max_tokens: n, temperature: 0, ignore_eos: true, stream: true,
    stream_options: { include_usage: true },
  });
  let signalled = false;
  let usage;
  let finish;
  for await (const chunk of stream) {
    if (!signalled) {
      server.kill("SIGTERM");
      signalled = true;
    }
    if (chunk.usage) usage = chunk.usage;
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(finish, "length");
  assert.equal(usage.completion_tokens, n);
  const code = await new Promise((res) => (server.exitCode !== null ? res(server.exitCode) : server.on("exit", res)));
  assert.equal(code, 0, serverStderr);
  assert.match(serverStderr, /SIGTERM: shutting down/);
  await assert.rejects(fetch(`${base}/health`));
});
