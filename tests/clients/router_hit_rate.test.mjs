// The warm cache hit rate that routing buys, through `sluice route` over 4 real `sluice serve`
// replicas (the demo model): the bench's chat workload under round_robin and under cache_aware,
// fresh replicas for each. Run by ctest (tests/clients/CMakeLists.txt) as
//   SLUICE_BIN=build/release/src/cli/sluice node --test tests/clients/router_hit_rate.test.mjs
//
// What can hold here, by arithmetic: a turn can reuse at most the previous turn's prompt (the
// demo's gibberish answers do not re-tokenize to the tokens it generated), so with 4 equal turns
// no policy passes sum(k - 1) / sum(k) = 6 / 10 = 60%; round robin already finds earlier turns
// on the replica it picks (19-27% measured), so the 3x is out of reach on this workload
// whenever round robin is above 20%. The test asks for what sticky routing must give: at least
// 1.5x round robin's rate and at least 3/4 of the ceiling.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFile } from "node:child_process";
import { promisify } from "node:util";
import { readFile, mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

const BIN = process.env.SLUICE_BIN;
if (!BIN) throw new Error("set SLUICE_BIN to the sluice binary");
const procs = new Set();
after(() => {
  for (const p of procs) p.kill("SIGKILL");
});

function start(args) {
  return new Promise((resolve, reject) => {
    const p = spawn(BIN, args, { stdio: ["ignore", "pipe", "pipe"] });
    procs.add(p);
    let out = "", err = "";
    p.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/[\d.]+:\d+)/);
      if (m) resolve({ proc: p, url: m[1] });
    });
    p.stderr.on("data", (d) => (err += d));
    p.on("exit", (code) => {
      procs.delete(p);
      reject(new Error(`${args[0]} exited (${code}): ${err}`));
    });
  });
}

async function hitRate(policy) {
  const replicas = await Promise.all([0, 1, 2, 3].map(() => start(["serve", "--model", "demo", "--port", "0", "--threads", "1"])));
  const front = await start(["route", "--port", "0", "--policy", policy, ...replicas.flatMap((r) => ["--backend", r.url])]);
  const json = join(await mkdtemp(join(tmpdir(), "sluice-hit-")), "bench.json");
  await promisify(execFile)(BIN, [
    "bench", "--url", front.url, "--workload", "chat", "--sessions", "16", "--turns", "4", "--prompt-tokens", "64",
    "--output-tokens", "16", "-c", "8", "--seed", "5", "--no-progress", "--json", json,
  ], { timeout: 240000 });
  for (const p of [front, ...replicas]) p.proc.kill("SIGTERM");
  const summary = JSON.parse(await readFile(json, "utf8")).summary;
  assert.equal(summary.num_errors, 0);
  return summary.cached_fraction;
}

test("cache_aware routing keeps conversations' prefixes warm: 1.5x round robin, 3/4 of the ceiling", async () => {
  const roundRobin = await hitRate("round_robin");
  const cacheAware = await hitRate("cache_aware");
  console.log(`cached prompt tokens: round_robin ${(100 * roundRobin).toFixed(1)}%, cache_aware ${(100 * cacheAware).toFixed(1)}%`);
  assert.ok(cacheAware >= 1.5 * roundRobin, `${cacheAware} vs ${roundRobin}`);
  assert.ok(cacheAware >= 0.75 * 0.6, `${cacheAware}`);
});
