#include "eval/runner.h"

#include <atomic>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "eval/compare.h"
#include "eval/render.h"
#include "eval/stats.h"

namespace sluice::eval {
namespace {

std::string hex64(uint64_t x) { return fmt::format("{:016x}", x); }

Json likelihood_body(const Provider& p, const std::string& prompt) {
  Json body = {{"prompt", prompt}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 1}, {"temperature", 0}};
  if (!p.model.empty()) body["model"] = p.model;
  return body;
}

// The logprob of the bytes from `from` on (a token that straddles `from` counts with them) and
// how many tokens that is. The echoed first token has no logprob.
std::pair<double, int64_t> continuation_logprob(const Reply& r, int64_t from) {
  double sum = 0;
  int64_t n = 0;
  for (size_t i = 0; i < r.token_logprobs.size(); ++i) {
    const int64_t end = i + 1 < r.text_offsets.size() ? r.text_offsets[i + 1] : static_cast<int64_t>(r.text.size());
    if (end <= from || !r.token_logprobs[i]) continue;
    sum += *r.token_logprobs[i];
    ++n;
  }
  return {sum, n};
}

struct Answer {
  bool done = false;
  bool sent = false;  // a request was tried (answered, refused or failed), not the cache's answer
  Status status;
  Reply reply;
  bool cached = false;
};

}  // namespace

std::string content_hash(std::string_view data) {
  uint64_t a = 0xcbf29ce484222325ull, b = 0x84222325cbf29ce4ull;
  for (unsigned char c : data) {
    a = (a ^ c) * 0x100000001b3ull;
    b = (b ^ (c + 0x9Eu)) * 0x100000001b3ull;
  }
  // A final mix so that nearby inputs spread over every bit.
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  return hex64(mix(a)) + hex64(mix(b ^ a));
}

Result<Plan> plan_run(const Suite& suite_in, const RunOptions& options) {
  Plan plan;
  plan.suite = suite_in;
  Suite& suite = plan.suite;
  if (options.repeat > 0) suite.repeat = options.repeat;
  for (Provider& p : suite.providers) {
    if (!options.base_url.empty()) p.base_url = options.base_url;
    if (!options.base_url.empty() && options.api_key) p.api_key = *options.api_key, p.api_key_env.clear();
    if (!options.model.empty()) p.model = options.model;
    for (auto it = options.params.begin(); it != options.params.end(); ++it) p.params[it.key()] = it.value();
  }
  // A judge whose endpoint the suite left to the default goes where --base-url sends the
  // providers; one the suite points somewhere stays there.
  auto redirect_judge = [&options](std::optional<Provider>& judge) {
    if (!judge || options.base_url.empty() || !judge->base_url_default) return;
    judge->base_url = options.base_url;
    judge->base_url_default = false;
    if (options.api_key) judge->api_key = *options.api_key, judge->api_key_env.clear();
  };
  redirect_judge(suite.judge);
  for (TestCase& t : suite.tests) {
    for (Assertion& a : t.asserts) {
      redirect_judge(a.judge);
      // Found before any request, not after every answer is in.
      if (a.type == "llm-rubric" && !a.judge && !suite.judge) {
        return Error(StatusCode::kInvalid, "{}: llm-rubric needs a judge: a 'judge' provider in the suite, "
                     "defaultTest.options.provider, or 'provider' on the assertion", t.description);
      }
    }
  }
  if (suite.providers.empty()) return Error(StatusCode::kInvalid, "the suite has no provider that can run");
  // Items are known by these names (results are stored and compared by them): two alike would
  // overwrite each other's results, or be merged into one item.
  std::set<std::string> seen;
  for (const Provider& p : suite.providers) {
    if (!seen.insert(p.label).second) {
      return Error(StatusCode::kInvalid, "two providers are labelled '{}': give each its own 'label'", p.label);
    }
  }
  seen.clear();
  for (const Prompt& prompt : suite.prompts) {
    if (!seen.insert(prompt.label).second) {
      return Error(StatusCode::kInvalid, "two prompts are labelled '{}': give each its own 'label'", prompt.label);
    }
  }
  seen.clear();
  for (const TestCase& test : suite.tests) {
    if (!seen.insert(test.description + "\n" + test.vars.dump()).second) {
      return Error(StatusCode::kInvalid, "two tests have the description '{}' and the same vars {}: give them "
                   "different descriptions", test.description, test.vars.dump().substr(0, 200));
    }
  }
  for (const LikelihoodTask& lt : suite.likelihood) {
    seen.clear();
    for (const LikelihoodItem& item : lt.items) {
      if (!seen.insert(item.id).second) {
        return Error(StatusCode::kInvalid, "likelihood task '{}' has two items with id '{}'", lt.name, item.id);
      }
    }
  }

  // Probe each endpoint: is it there, and what is its system_fingerprint? One attempt where the
  // connection fails or times out (--timeout: an endpoint that loads its model on the first
  // request may need it all): one that is down or stuck is said after one attempt, not after
  // every retry. 429 and 5xx are retried as in the run.
  CallOptions probe = options.call;
  probe.retry_transport = false;
  for (const Provider& p : suite.providers) {
    SLUICE_ASSIGN_OR_RETURN(Json body, build_body(p, "Hello", nullptr, Json{{"max_tokens", 1}, {"temperature", 0}}, std::nullopt));
    body.erase("stop");
    auto reply = call(p, body, probe);
    if (!reply) {
      if (reply.error().code() == StatusCode::kInvalid) {
        return Error(StatusCode::kInvalid, "provider '{}': {}", p.label, reply.error().message());
      }
      return Error(StatusCode::kUnavailable, "provider '{}' cannot be reached: {}", p.label, reply.error().message());
    }
    plan.endpoint_fingerprints.push_back(reply->system_fingerprint);
    if (reply->system_fingerprint.empty()) {
      plan.notes.push_back(fmt::format("provider '{}' reports no system_fingerprint: --if-changed and the cache see "
                                       "changes of the suite only, not of the server", p.label));
    }
  }

  // The judges too (as the run asks them: chat): one that cannot be reached is said now, not
  // after every answer is in; what each reports is part of the fingerprint (a judge's new model
  // can change every grade).
  std::vector<std::pair<std::string, std::string>> judge_fingerprints;  // (label, fingerprint)
  std::set<std::string> probed;
  auto probe_judge = [&](const Provider& judge) -> Status {
    Provider j = judge;
    j.api = "chat";
    if (!probed.insert(j.base_url + "\n" + j.model + "\n" + j.label).second) return Status::ok();
    // As grading asks: a judge set to answer JSON (response_format) needs the word in the prompt.
    auto body = build_body(j, "Answer with the JSON object {\"pass\": true}.", nullptr,
                           Json{{"max_tokens", 16}, {"temperature", 0}}, std::nullopt);
    if (!body) return body.error();
    body->erase("stop");
    auto reply = call(j, *body, probe);
    if (!reply) {
      const bool refused = reply.error().code() == StatusCode::kInvalid;
      return Status::error(fmt::format("judge '{}' {}: {}", j.label, refused ? "refused the probe" : "cannot be reached",
                                       reply.error().message()),
                           refused ? StatusCode::kInvalid : StatusCode::kUnavailable);
    }
    judge_fingerprints.emplace_back(j.label, reply->system_fingerprint);
    return Status::ok();
  };
  for (const TestCase& t : suite.tests) {
    for (const Assertion& a : t.asserts) {
      if (a.type != "llm-rubric") continue;
      if (Status st = probe_judge(a.judge ? *a.judge : *suite.judge); !st) return Error(st);
    }
  }

  std::string fp = "suite\n" + suite.content;
  for (const auto& [label, fingerprint] : judge_fingerprints) fp += "\njudge " + label + " " + fingerprint;
  for (size_t pi = 0; pi < suite.providers.size(); ++pi) {
    const Provider& p = suite.providers[pi];
    const std::string endpoint = content_hash(p.base_url + "\n" + p.model + "\n" + plan.endpoint_fingerprints[pi]);
    fp += "\nprovider " + p.label + " " + plan.endpoint_fingerprints[pi];
    auto add = [&](Task t) {
      t.provider = pi;
      const std::string body = t.body.dump();
      t.cache_key = content_hash(endpoint + "\n" + body + "\n" + std::to_string(t.sample));
      fp += "\n" + body + " " + std::to_string(t.sample);
      plan.tasks.push_back(std::move(t));
    };
    for (size_t ti = 0; ti < suite.tests.size(); ++ti) {
      const TestCase& test = suite.tests[ti];
      for (const Prompt& prompt : suite.prompts) {
        SLUICE_ASSIGN_OR_RETURN(const RenderedPrompt rendered, render_prompt(prompt, test.vars));
        const std::string key = content_hash(p.label + "\n" + prompt.label + "\n" + test.description + "\n" + test.vars.dump());
        for (int32_t s = 0; s < suite.repeat; ++s) {
          std::optional<int64_t> seed;
          if (p.params.contains("seed") && p.params["seed"].is_number_integer()) seed = p.params["seed"].get<int64_t>() + s;
          auto body = build_body(p, rendered.text, rendered.messages, nullptr, seed);
          if (!body) return Error(body.error().with_context(fmt::format("test '{}'", test.description)));
          add(Task{.kind = Task::kTest, .item_key = key, .sample = s, .test = ti, .prompt_label = prompt.label, .body = std::move(*body)});
        }
      }
    }
    for (size_t k = 0; k < suite.likelihood.size(); ++k) {
      const LikelihoodTask& lt = suite.likelihood[k];
      if (p.api != "completion") {
        suite.not_run.push_back(fmt::format("likelihood task '{}' on provider '{}': scoring needs a completion provider "
                                            "(openai:completion:MODEL; echo and logprobs are legacy-completions fields)",
                                            lt.name, p.label));
        continue;
      }
      for (size_t i = 0; i < lt.items.size(); ++i) {
        const LikelihoodItem& item = lt.items[i];
        const std::string key = content_hash(p.label + "\nlikelihood\n" + lt.name + "\n" + item.id);
        if (lt.type == "perplexity") {
          add(Task{.kind = Task::kPerplexity, .item_key = key, .task = k, .item = i, .prompt_label = lt.name,
                   .body = likelihood_body(p, item.text)});
        } else {
          for (size_t c = 0; c < item.choices.size(); ++c) {
            add(Task{.kind = Task::kChoice, .item_key = key, .task = k, .item = i, .choice = c, .prompt_label = lt.name,
                     .body = likelihood_body(p, item.context + item.choices[c])});
          }
        }
      }
    }
  }
  if (plan.tasks.empty()) return Error(StatusCode::kInvalid, "nothing to run: no provider can run any test of the suite");
  plan.fingerprint = content_hash(fp);
  return plan;
}

Result<RunOutcome> execute_run(const Plan& plan, Store& store, const RunOptions& options) {
  const Suite& suite = plan.suite;
  RunRow run;
  run.suite = suite.description.empty() ? std::filesystem::path(suite.path).filename().string() : suite.description;
  run.suite_path = suite.path.empty() ? "" : std::filesystem::absolute(suite.path).lexically_normal().string();
  run.fingerprint = plan.fingerprint;
  Json providers = Json::array();
  for (size_t i = 0; i < suite.providers.size(); ++i) {
    const Provider& p = suite.providers[i];
    providers.push_back({{"label", p.label}, {"base_url", p.base_url}, {"model", p.model}, {"api", p.api},
                         {"params", p.params}, {"system_fingerprint", plan.endpoint_fingerprints[i]}});
  }
  run.options = {{"providers", providers}, {"repeat", suite.repeat}, {"not_run", suite.not_run}};
  SLUICE_ASSIGN_OR_RETURN(const int64_t run_id, store.begin_run(run));

  RunOutcome outcome;
  outcome.run_id = run_id;
  std::vector<Answer> answers(plan.tasks.size());
  std::atomic<size_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex progress_mu;
  auto stopped = [&] { return options.stop && options.stop->load(); };
  // A provider that stops answering mid-run (its server died, or a router in front answers 503):
  // once a request has failed every retry (a failed connection, a timeout, 429 or 5xx), the next
  // are tried once each, and after kGiveUpAfter such failures in a row no more are sent to it
  // (each would wait out its retries: minutes for a long suite). Any answer, or a refusal,
  // resets it. With -j N, the N - 1 requests already in flight still end.
  constexpr int32_t kGiveUpAfter = 8;
  std::vector<int32_t> failing(suite.providers.size(), 0);
  std::vector<std::string> last_failure(suite.providers.size());
  std::mutex failing_mu;
  auto send = [&](const Task& t, Answer& a) {
    const Provider& p = suite.providers[t.provider];
    CallOptions attempt = options.call;
    {
      std::lock_guard lock(failing_mu);
      if (failing[t.provider] >= kGiveUpAfter) {
        a.status = Status::error(fmt::format("not sent: provider '{}' failed {} requests in a row (the last: {})",
                                             p.label, failing[t.provider], last_failure[t.provider]),
                                 StatusCode::kUnavailable);
        return;
      }
      if (failing[t.provider] > 0) attempt.max_retries = 0;  // one attempt: no retry of any kind
    }
    a.sent = true;  // tried, not from the cache: answered, refused, or failed
    auto reply = call(p, t.body, attempt);
    {
      std::lock_guard lock(failing_mu);
      if (reply || reply.error().code() != StatusCode::kUnavailable) {
        failing[t.provider] = 0;
      } else {
        ++failing[t.provider];
        last_failure[t.provider] = reply.error().message();
      }
    }
    if (reply) {
      a.reply = std::move(*reply);
      a.done = true;
      // Stored at once: a run killed after this point does not send it again.
      if (Status st = store.cache_put(t.cache_key, a.reply.body, a.reply.latency_ms); !st) a.status = st;
    } else {
      a.status = reply.error();
    }
  };
  auto worker = [&] {
    for (size_t i = next++; i < plan.tasks.size() && !stopped(); i = next++) {
      const Task& t = plan.tasks[i];
      Answer& a = answers[i];
      const Provider& p = suite.providers[t.provider];
      if (options.use_cache) {
        auto hit = store.cache_get(t.cache_key);
        if (hit && *hit) {
          auto reply = parse_reply((*hit)->response, p.api);
          if (reply) {
            a.reply = std::move(*reply);
            a.reply.latency_ms = (*hit)->latency_ms;
            a.cached = a.done = true;
          }
        }
      }
      if (!a.done) send(t, a);
      const int64_t d = ++done;
      if (options.progress) {
        std::lock_guard lock(progress_mu);
        options.progress(d, static_cast<int64_t>(plan.tasks.size()));
      }
    }
  };
  std::vector<std::thread> threads;
  for (int32_t j = 0; j < std::max(1, options.jobs); ++j) threads.emplace_back(worker);
  for (std::thread& th : threads) th.join();
  // Stopped while sending, or while grading (a judge's requests): stored as interrupted, with
  // whatever results were stored so far and the answers in the cache.
  auto interrupted = [&]() -> Result<RunOutcome> {
    int64_t answered = 0;
    for (const Answer& a : answers) answered += a.done;
    outcome.interrupted = true;
    outcome.num_sent = answered;
    outcome.summary = {{"interrupted", true}, {"answered", answered}, {"tasks", plan.tasks.size()}};
    SLUICE_RETURN_IF_ERROR(store.finish_run(run_id, "interrupted", outcome.summary));
    return outcome;
  };
  if (stopped()) return interrupted();

  JudgeFn ask_judge = [&](const Provider& judge, const std::string& prompt) -> Result<Reply> {
    Provider j = judge;
    if (j.api != "chat") j.api = "chat";
    SLUICE_ASSIGN_OR_RETURN(Json body, build_body(j, prompt, nullptr, Json{{"temperature", 0}}, std::nullopt));
    const std::string key = content_hash("judge\n" + j.base_url + "\n" + body.dump());
    if (options.use_cache) {
      auto hit = store.cache_get(key);
      if (hit && *hit) return parse_reply((*hit)->response, "chat");
    }
    SLUICE_ASSIGN_OR_RETURN(Reply r, call(j, body, options.call));
    (void)store.cache_put(key, r.body, r.latency_ms);
    return r;
  };

  // Grade and store, item by item.
  struct Tally {
    int64_t n = 0, passed = 0;
    double score = 0;
  };
  std::map<std::string, Tally> metrics;  // named assertion metrics and likelihood tasks
  std::map<std::string, std::pair<double, int64_t>> perplexity;  // task -> (sum logprob, tokens)
  Tally tests;
  std::map<std::string, bool> item_seen;
  std::map<std::string, std::pair<int64_t, int64_t>> test_samples;  // test item -> (samples, passed)
  std::map<std::string, double> item_pass_fraction;                 // test item -> its passFraction
  std::set<std::string> item_errors;                                // test items with a sample unanswered
  for (size_t i = 0; i < plan.tasks.size();) {
    if (stopped()) return interrupted();
    const Task& t = plan.tasks[i];
    // A multiple-choice sample spans one task per choice.
    size_t end = i + 1;
    while (t.kind == Task::kChoice && end < plan.tasks.size() && plan.tasks[end].kind == Task::kChoice &&
           plan.tasks[end].item_key == t.item_key && plan.tasks[end].sample == t.sample) {
      ++end;
    }
    const Provider& p = suite.providers[t.provider];
    ResultRow row;
    row.item_key = t.item_key;
    row.sample = t.sample;
    row.provider = p.label;
    row.prompt = t.prompt_label;
    row.request = t.body;
    std::string error;
    bool refused = false;
    for (size_t k = i; k < end; ++k) {
      if (!answers[k].done && error.empty()) {
        error = answers[k].status.message();
        refused = answers[k].status.code() == StatusCode::kInvalid;
      }
      if (answers[k].cached) ++outcome.num_cached;
      else if (answers[k].sent) ++outcome.num_sent;  // a refusal (HTTP 400) was sent too
    }
    item_seen[t.item_key] = true;
    ++outcome.num_samples;
    if (!error.empty()) {
      row.error = error;
      ++outcome.num_errors;
      outcome.num_refused += refused;
      if (outcome.first_error.empty()) outcome.first_error = error;
    }
    if (t.kind == Task::kTest) {
      const TestCase& test = suite.tests[t.test];
      row.test = test.name();
      row.vars = test.vars;
      if (error.empty()) {
        const Reply& r = answers[i].reply;
        row.response = r.body;
        row.output = r.text;
        row.latency_ms = r.latency_ms;
        row.system_fingerprint = r.system_fingerprint;
        auto g = grade(test, r, test.vars, suite.judge, ask_judge);
        if (!g) {
          row.error = g.error().message();
          ++outcome.num_errors;
          if (outcome.first_error.empty()) outcome.first_error = row.error;
        } else {
          row.pass = g->pass;
          row.score = g->score;
          Json results = Json::array();
          for (const AssertionResult& a : g->results) {
            results.push_back({{"type", a.type}, {"pass", a.pass}, {"score", a.score}, {"weight", a.weight},
                               {"metric", a.metric}, {"reason", a.reason}, {"judge", a.judge}});
            if (!a.metric.empty()) {
              Tally& m = metrics[a.metric];
              ++m.n, m.passed += a.pass, m.score += a.score;
            }
          }
          row.grades = {{"assertions", results}, {"pass_fraction", test.pass_fraction}};
        }
      }
      ++tests.n, tests.passed += row.pass, tests.score += row.score;
      auto& [ns, np] = test_samples[t.item_key];
      ++ns, np += row.pass;
      item_pass_fraction[t.item_key] = test.pass_fraction;
      if (!row.error.empty()) item_errors.insert(t.item_key);
    } else {
      const LikelihoodTask& lt = suite.likelihood[t.task];
      const LikelihoodItem& item = lt.items[t.item];
      row.test = fmt::format("{} {}", lt.name, item.id);
      row.vars = {{"task", lt.name}, {"item", item.id}};
      if (error.empty()) {
        if (t.kind == Task::kPerplexity) {
          const auto [sum, n] = continuation_logprob(answers[i].reply, 0);
          row.pass = true;
          row.score = n > 0 ? sum / static_cast<double>(n) : 0.0;
          row.grades = {{"logprob", sum}, {"tokens", n}, {"kind", "perplexity"}};
          row.output = item.text;
          auto& [s, c] = perplexity[lt.name];
          s += sum, c += n;
        } else {
          Json choices = Json::array();
          std::vector<double> lps;
          int32_t pred = 0, pred_norm = 0;
          for (size_t k = i; k < end; ++k) {
            const auto [sum, n] = continuation_logprob(answers[k].reply, static_cast<int64_t>(item.context.size()));
            const double norm = sum / static_cast<double>(std::max<size_t>(1, item.choices[k - i].size()));
            choices.push_back({{"logprob", sum}, {"tokens", n}, {"logprob_per_byte", norm}});
            lps.push_back(sum);
            if (sum > lps[pred]) pred = static_cast<int32_t>(k - i);
            if (norm > choices[pred_norm]["logprob_per_byte"].get<double>()) pred_norm = static_cast<int32_t>(k - i);
          }
          // The gold choice's share of the probability of all choices: a score in (0, 1).
          const double top = *std::max_element(lps.begin(), lps.end());
          double total = 0;
          for (double lp : lps) total += std::exp(lp - top);
          row.pass = pred == item.gold;
          row.score = std::exp(lps[item.gold] - top) / total;
          row.output = item.choices[pred];
          row.grades = {{"choices", choices}, {"pred", pred}, {"pred_norm", pred_norm}, {"gold", item.gold},
                        {"kind", "multiple-choice"}, {"acc_norm", pred_norm == item.gold}};
          Tally& m = metrics["accuracy " + lt.name];
          ++m.n, m.passed += row.pass, m.score += row.pass ? 1.0 : 0.0;
        }
      }
    }
    if (row.error.empty()) row.pass ? ++outcome.num_passed : ++outcome.num_failed;
    SLUICE_RETURN_IF_ERROR(store.add_result(run_id, row));
    i = end;
  }
  outcome.num_items = static_cast<int64_t>(item_seen.size());
  Json summary = {{"samples", outcome.num_samples}, {"items", outcome.num_items}, {"passed", outcome.num_passed},
                  {"failed", outcome.num_failed}, {"errors", outcome.num_errors}};
  if (tests.n > 0) {
    summary["test_samples"] = tests.n;  // the pass rate's and score's count: likelihood items are not in them
    summary["pass_rate"] = static_cast<double>(tests.passed) / static_cast<double>(tests.n);
    summary["score"] = tests.score / static_cast<double>(tests.n);
  }
  if (suite.repeat > 1 && !test_samples.empty()) {
    // With repeats: pass@k (some of k samples pass) and pass^k (all k pass), k = 1 and k = the
    // repeat count, from each item's n samples (stats.h), averaged over the items.
    const int64_t k = suite.repeat;
    double at1 = 0, at_k = 0, hat_k = 0;
    for (const auto& [key, np] : test_samples) {
      at1 += pass_at_k(np.first, np.second, 1);
      at_k += pass_at_k(np.first, np.second, std::min(k, np.first));
      hat_k += pass_hat_k(np.first, np.second, std::min(k, np.first));
    }
    const auto n = static_cast<double>(test_samples.size());
    // The items' pass rate, as compare counts it: an item passes when its samples' pass
    // fraction reaches the test's passFraction.
    double items_passed = 0;
    for (const auto& [key, np] : test_samples) {
      items_passed += item_passes(np.second, np.first, item_pass_fraction[key], item_errors.contains(key));
    }
    summary["item_pass_rate"] = items_passed / n;
    summary["pass@1"] = at1 / n;
    summary[fmt::format("pass@{}", k)] = at_k / n;
    summary[fmt::format("pass^{}", k)] = hat_k / n;
  }
  Json m = Json::object();
  for (const auto& [name, t] : metrics) m[name] = t.n ? t.score / static_cast<double>(t.n) : 0.0;
  for (const auto& [name, pc] : perplexity) {
    m["perplexity " + name] = pc.second ? std::exp(-pc.first / static_cast<double>(pc.second)) : 0.0;
  }
  summary["metrics"] = m;
  summary["fingerprint"] = plan.fingerprint;
  outcome.summary = summary;
  SLUICE_RETURN_IF_ERROR(store.finish_run(run_id, outcome.num_errors > 0 ? "failed" : "done", summary));
  return outcome;
}

}  // namespace sluice::eval
