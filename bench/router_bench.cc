// The router's overhead: the same load against a backend that answers at once (the fake
// OpenAI server of the load generator's tests, one token per answer), straight and through an
// in-process `sluice route`, in one run. Reports the added latency (p50, p99) at --rate requests/s
// and the most requests/s each path carries in closed loop at --concurrency.
#include <cstdio>

#include <CLI/CLI.hpp>

#include "bench/bench.h"
#include "bench/fake_openai_server.h"
#include "router/router.h"

namespace {

sluice::bench::BenchConfig load(const std::string& url) {
  sluice::bench::BenchConfig c;
  c.url = url;
  c.model = "fake";
  c.workload.prompt_tokens = {8, 8};
  c.workload.output_tokens = {1, 1};
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("router_bench: sluice route's added latency and its most requests/s, against a fake backend");
  double rate = 1000;
  int64_t requests = 5000;
  int32_t concurrency = 64;
  int threads = 2;
  std::string policy = "cache_aware";
  app.add_option("--rate", rate, "Open loop: requests/s for the latency comparison")->capture_default_str();
  app.add_option("-n,--num-requests", requests, "Requests per measurement")->capture_default_str();
  app.add_option("-c,--concurrency", concurrency, "Closed loop: clients for the throughput measurement")->capture_default_str();
  app.add_option("--threads", threads, "The router's I/O threads")->capture_default_str();
  app.add_option("--policy", policy, "The router's policy")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  sluice::bench::testing::FakeOpenAi fake;
  sluice::router::RouterConfig rc;
  rc.port = 0;
  rc.threads = threads;
  rc.policy = policy;
  rc.metrics_interval_seconds = 0;
  rc.backends.push_back(*sluice::router::parse_backend(fake.url()));
  auto router = sluice::router::Router::create(rc);
  if (!router) {
    std::fprintf(stderr, "router_bench: %s\n", router.error().message().c_str());
    return 1;
  }
  (*router)->start();
  const std::string via = "http://127.0.0.1:" + std::to_string((*router)->port());
  std::printf("%-10s %-26s %10s %10s %10s %12s\n", "path", "load", "e2e p50", "e2e p99", "errors", "requests/s");
  double p50[2], p99[2], rps[2];
  for (int pass = 0; pass < 2; ++pass) {
    const std::string url = pass == 0 ? fake.url() : via;
    sluice::bench::BenchConfig open = load(url);
    open.rate = rate;
    open.num_requests = requests;
    open.warmup = 100;
    auto a = sluice::bench::run(open);
    sluice::bench::BenchConfig closed = load(url);
    closed.concurrency = concurrency;
    closed.num_requests = requests;
    closed.warmup = 100;
    auto b = sluice::bench::run(closed);
    if (!a || !b) {
      std::fprintf(stderr, "router_bench: %s\n", (!a ? a.error() : b.error()).message().c_str());
      return 1;
    }
    const char* name = pass == 0 ? "direct" : "router";
    for (const auto* r : {&*a, &*b}) {
      for (const auto& e : r->summary.errors) std::fprintf(stderr, "%s: %ld x %s: %s\n", name, (long)e.count, e.kind.c_str(), e.sample.c_str());
    }
    p50[pass] = a->summary.e2e_ms.p50, p99[pass] = a->summary.e2e_ms.p99, rps[pass] = b->summary.requests_per_s;
    std::printf("%-10s %-26s %8.3f ms %7.3f ms %10ld %12s\n", name, (std::to_string(static_cast<int>(rate)) + " req/s open loop").c_str(),
                p50[pass], p99[pass], static_cast<long>(a->summary.num_errors), "");
    std::printf("%-10s %-26s %10s %10s %10ld %12.0f\n", name, ("-c " + std::to_string(concurrency) + " closed loop").c_str(), "",
                "", static_cast<long>(b->summary.num_errors), rps[pass]);
  }
  std::printf("added by the router at %.0f req/s: p50 %.3f ms, p99 %.3f ms; closed loop: %.0f%% of direct's requests/s\n",
              rate, p50[1] - p50[0], p99[1] - p99[0], 100.0 * rps[1] / rps[0]);
}
