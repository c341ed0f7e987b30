#include "eval/assertions.h"

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "eval/json_schema.h"
#include "eval/render.h"

namespace sluice::eval {
namespace {

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::vector<uint32_t> code_points(std::string_view s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

std::string value_text(const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// A list value, or a comma-separated string, as promptfoo reads contains-any/all.
std::vector<std::string> value_list(const Json& v) {
  std::vector<std::string> out;
  if (v.is_array()) {
    for (const Json& x : v) out.push_back(value_text(x));
  } else {
    const std::string s = value_text(v);
    size_t start = 0;
    for (;;) {
      const size_t comma = s.find(',', start);
      std::string part = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      const auto b = part.find_first_not_of(' '), e = part.find_last_not_of(' ');
      if (b != std::string::npos) out.push_back(part.substr(b, e - b + 1));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return out;
}

// The first balanced {...} or [...] in `text` that parses as JSON.
// The JSON objects and arrays in free text, in order: each `{` or `[` up to its balanced close
// that parses as JSON (a match's insides are not searched again).
std::vector<Json> find_all_json(const std::string& text, size_t most = SIZE_MAX) {
  std::vector<Json> found;
  for (size_t i = 0; i < text.size() && found.size() < most; ++i) {
    if (text[i] != '{' && text[i] != '[') continue;
    int depth = 0;
    bool in_string = false;
    for (size_t j = i; j < text.size(); ++j) {
      const char c = text[j];
      if (in_string) {
        if (c == '\\') ++j;
        else if (c == '"') in_string = false;
        continue;
      }
      if (c == '"') in_string = true;
      else if (c == '{' || c == '[') ++depth;
      else if ((c == '}' || c == ']') && --depth == 0) {
        Json j2 = Json::parse(text.substr(i, j - i + 1), nullptr, false);
        if (!j2.is_discarded()) {
          found.push_back(std::move(j2));
          i = j;
        }
        break;
      }
    }
  }
  return found;
}

std::optional<Json> find_json(const std::string& text) {
  std::vector<Json> first = find_all_json(text, 1);
  if (first.empty()) return std::nullopt;
  return std::move(first[0]);
}

std::optional<double> first_number(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const bool sign = (text[i] == '-' || text[i] == '+') && i + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[i + 1]));
    if (!sign && !std::isdigit(static_cast<unsigned char>(text[i]))) continue;
    std::string num;
    size_t j = i;
    if (sign) num += text[j++];
    while (j < text.size() && (std::isdigit(static_cast<unsigned char>(text[j])) || text[j] == ',' || text[j] == '.' ||
                               text[j] == 'e' || text[j] == 'E')) {
      if (text[j] != ',') num += text[j];  // thousands separators
      ++j;
    }
    while (!num.empty() && !std::isdigit(static_cast<unsigned char>(num.back()))) num.pop_back();
    char* end = nullptr;
    const double v = std::strtod(num.c_str(), &end);
    if (end && end != num.c_str()) return v;
  }
  return std::nullopt;
}

Status invalid_status(std::string message) { return Status::error(std::move(message), StatusCode::kInvalid); }

Result<double> number_value(const Json& v, const std::string& type) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    char* end = nullptr;
    const std::string s = v.get<std::string>();
    const double d = std::strtod(s.c_str(), &end);
    if (end && end != s.c_str() && *end == '\0') return d;
  }
  return Error(StatusCode::kInvalid, "assertion '{}' needs a number, got {}", type, v.dump());
}

std::optional<double> mean_logprob(const Reply& r) {
  double sum = 0;
  int64_t n = 0;
  for (const auto& lp : r.token_logprobs) {
    if (lp) sum += *lp, ++n;
  }
  if (n == 0) return std::nullopt;
  return sum / static_cast<double>(n);
}

// The grading prompt of llm-rubric (the judge answers with JSON, as promptfoo's graders do).
std::string rubric_prompt(const std::string& rubric, const std::string& output) {
  return fmt::format(
      "You are grading an output against a rubric. Answer with only a JSON object "
      "{{\"reason\": string, \"pass\": boolean, \"score\": number between 0 and 1}}.\n\n"
      "<Output>\n{}\n</Output>\n<Rubric>\n{}\n</Rubric>",
      output, rubric);
}

}  // namespace

Status check_assertion_spec(const Assertion& a) {
  const std::string& t = a.type;
  const Json& v = a.value;
  // A value that a template fills is known only per test: its checks wait for the grading.
  auto has_template = [](const Json& j) {
    return j.is_string() && (j.get<std::string>().find("{{") != std::string::npos ||
                             j.get<std::string>().find("{%") != std::string::npos);
  };
  const bool limit_type = t == "latency" || t == "logprob" || t == "perplexity";
  const bool value_optional = t == "is-json" || t == "contains-json" || limit_type;
  if (!value_optional && v.is_null()) return invalid_status(fmt::format("assertion '{}' needs a 'value'", t));
  if (limit_type && !a.threshold && v.is_null()) {
    return invalid_status(fmt::format("assertion '{}' needs a threshold (or a value){}", t,
                                      t == "latency" ? ", in milliseconds" : ""));
  }
  auto number = [&](const Json& j) -> Status {
    if (j.is_null() || has_template(j)) return Status::ok();
    if (auto n = number_value(j, t); !n) return n.error();
    return Status::ok();
  };
  if (t == "numeric" || t == "max-tokens" || (limit_type && !a.threshold)) {
    if (Status st = number(v); !st) return st;
  }
  // A limit below 0 on a count or a time fails every answer.
  if ((t == "latency" || t == "max-tokens") && v.is_number() && v.get<double>() < 0) {
    return invalid_status(fmt::format("assertion '{}': the limit {} is below 0", t, v.dump()));
  }
  if (t == "latency" && a.threshold && *a.threshold < 0) {
    return invalid_status(fmt::format("assertion 'latency': the threshold {} is below 0", *a.threshold));
  }
  if (t == "length") {
    if (v.is_object()) {
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (it.key() != "min" && it.key() != "max") {
          return invalid_status(fmt::format("assertion 'length': '{}' is not min or max", it.key()));
        }
        if (Status st = number(it.value()); !st) return st;
      }
    } else if (Status st = number(v); !st) {
      return st;
    }
  }
  return Status::ok();
}

size_t edit_distance(std::string_view a, std::string_view b) {
  const std::vector<uint32_t> x = code_points(a), y = code_points(b);
  std::vector<size_t> row(y.size() + 1);
  for (size_t j = 0; j <= y.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= x.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= y.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (x[i - 1] == y[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[y.size()];
}

Result<AssertionResult> check_assertion(const Assertion& a, const Reply& reply, const Json& vars,
                                        const std::optional<Provider>& default_judge, const JudgeFn& ask_judge) {
  AssertionResult r;
  r.type = (a.negate ? "not-" : "") + a.type;
  r.weight = a.weight;
  r.metric = a.metric;
  SLUICE_ASSIGN_OR_RETURN(const Json value, render_value(a.value, vars));
  const std::string& out = reply.text;
  bool pass = false;
  double score = -1;  // -1: the pass as a score
  const std::string& t = a.type;
  auto need_value = [&]() -> Status {
    if (value.is_null()) return Status::error(fmt::format("assertion '{}' needs a value", t), StatusCode::kInvalid);
    return Status::ok();
  };
  if (t == "equals") {
    SLUICE_RETURN_IF_ERROR(need_value());
    if (value.is_object() || value.is_array()) {
      const Json parsed = Json::parse(out, nullptr, false);
      pass = !parsed.is_discarded() && parsed == value;
    } else {
      pass = out == value_text(value);
    }
    if (!pass) r.reason = fmt::format("expected {}", value.dump().substr(0, 200));
  } else if (t == "contains" || t == "icontains" || t == "starts-with") {
    SLUICE_RETURN_IF_ERROR(need_value());
    const std::string v = value_text(value);
    pass = t == "contains" ? out.find(v) != std::string::npos
           : t == "icontains" ? ascii_lower(out).find(ascii_lower(v)) != std::string::npos
                              : out.starts_with(v);
    if (!pass) r.reason = fmt::format("'{}' not found", v.substr(0, 200));
  } else if (t == "contains-any" || t == "contains-all" || t == "icontains-any" || t == "icontains-all") {
    SLUICE_RETURN_IF_ERROR(need_value());
    const bool icase = t[0] == 'i';
    const bool all = t.ends_with("all");
    const std::string hay = icase ? ascii_lower(out) : out;
    size_t found = 0;
    std::string missing;
    const std::vector<std::string> items = value_list(value);
    for (const std::string& item : items) {
      if (hay.find(icase ? ascii_lower(item) : item) != std::string::npos) ++found;
      else if (missing.empty()) missing = item;
    }
    pass = all ? found == items.size() : found > 0;
    if (!pass) r.reason = all ? fmt::format("'{}' not found", missing) : "none of them found";
  } else if (t == "regex") {
    SLUICE_RETURN_IF_ERROR(need_value());
    SLUICE_ASSIGN_OR_RETURN(pass, regex_search(value_text(value), out));
    if (!pass) r.reason = fmt::format("no match for /{}/", value_text(value));
  } else if (t == "is-json" || t == "contains-json" || t == "json-schema") {
    // contains-json: any JSON in the output will do, the first that meets the schema.
    std::vector<Json> parsed;
    if (t == "contains-json") {
      parsed = find_all_json(out);
    } else {
      Json j = Json::parse(out, nullptr, false);
      if (!j.is_discarded()) parsed.push_back(std::move(j));
    }
    if (t == "json-schema") SLUICE_RETURN_IF_ERROR(need_value());
    if (parsed.empty()) {
      r.reason = t == "contains-json" ? "no JSON found in the output" : "the output is not JSON";
    } else if (value.is_object() || value.is_boolean()) {
      const Json schema = value;
      for (const Json& candidate : parsed) {
        Status st = validate_json(candidate, schema);
        if (st.code() == StatusCode::kInvalid) return Error(st);
        pass = st.is_ok();
        if (pass) break;
        if (r.reason.empty()) r.reason = st.message();
      }
      if (pass) r.reason.clear();
      else if (parsed.size() > 1) r.reason = fmt::format("none of the {} JSON values meets the schema; the first: {}", parsed.size(), r.reason);
    } else if (value.is_null()) {
      pass = true;  // no schema: any JSON
    } else {
      return Error(StatusCode::kInvalid, "assertion '{}': the schema must be a JSON object (or true/false)", t);
    }
  } else if (t == "levenshtein") {
    SLUICE_RETURN_IF_ERROR(need_value());
    const std::string v = value_text(value);
    const size_t d = edit_distance(out, v);
    const size_t longest = std::max(code_points(out).size(), code_points(v).size());
    const double normalized = longest == 0 ? 0.0 : static_cast<double>(d) / static_cast<double>(longest);
    const double limit = a.threshold.value_or(5.0);
    pass = limit < 1.0 ? normalized <= limit : static_cast<double>(d) <= limit;
    score = 1.0 - normalized;
    r.reason = fmt::format("distance {} ({:.3f} normalized)", d, normalized);
  } else if (t == "numeric") {
    SLUICE_RETURN_IF_ERROR(need_value());
    SLUICE_ASSIGN_OR_RETURN(const double want, number_value(value, t));
    const std::optional<double> got = first_number(out);
    const double tolerance = a.threshold.value_or(0.0);
    pass = got && std::fabs(*got - want) <= tolerance + 1e-9 * std::max(1.0, std::fabs(want));
    r.reason = got ? fmt::format("found {}, expected {} +- {}", *got, want, tolerance) : "no number in the output";
  } else if (t == "latency") {
    const double limit = a.threshold ? *a.threshold : value.is_null() ? -1 : number_value(value, t).value_or(-1);
    if (limit < 0) return Error(StatusCode::kInvalid, "assertion 'latency' needs a threshold in milliseconds");
    pass = reply.latency_ms <= limit;
    r.reason = fmt::format("{:.0f} ms, limit {:.0f} ms", reply.latency_ms, limit);
  } else if (t == "max-tokens") {
    SLUICE_RETURN_IF_ERROR(need_value());
    SLUICE_ASSIGN_OR_RETURN(const double limit, number_value(value, t));
    if (reply.completion_tokens < 0) {
      r.reason = "the answer reports no usage.completion_tokens";
    } else {
      pass = static_cast<double>(reply.completion_tokens) <= limit;
      r.reason = fmt::format("{} tokens, at most {}", reply.completion_tokens, limit);
    }
  } else if (t == "length") {
    SLUICE_RETURN_IF_ERROR(need_value());
    const auto n = static_cast<double>(code_points(out).size());
    double lo = 0, hi = INFINITY;
    if (value.is_object()) {
      if (value.contains("min")) {
        SLUICE_ASSIGN_OR_RETURN(lo, number_value(value["min"], t));
      }
      if (value.contains("max")) {
        SLUICE_ASSIGN_OR_RETURN(hi, number_value(value["max"], t));
      }
    } else {
      SLUICE_ASSIGN_OR_RETURN(hi, number_value(value, t));
    }
    pass = n >= lo && n <= hi;
    r.reason = fmt::format("{} characters", n);
  } else if (t == "finish-reason") {
    SLUICE_RETURN_IF_ERROR(need_value());
    pass = reply.finish_reason == value_text(value);
    r.reason = fmt::format("finish_reason '{}'", reply.finish_reason);
  } else if (t == "logprob" || t == "perplexity") {
    const double limit = a.threshold ? *a.threshold : value.is_null() ? NAN : number_value(value, t).value_or(NAN);
    if (std::isnan(limit)) return Error(StatusCode::kInvalid, "assertion '{}' needs a value (the limit)", t);
    const std::optional<double> m = mean_logprob(reply);
    if (!m) {
      r.reason = "the answer has no logprobs (set logprobs in the provider's config)";
    } else if (t == "logprob") {
      pass = *m >= limit;
      r.reason = fmt::format("mean logprob {:.4f}, at least {}", *m, limit);
    } else {
      const double ppl = std::exp(-*m);
      pass = ppl <= limit;
      r.reason = fmt::format("perplexity {:.4f}, at most {}", ppl, limit);
    }
  } else if (t == "llm-rubric") {
    SLUICE_RETURN_IF_ERROR(need_value());
    const std::optional<Provider>& judge = a.judge ? a.judge : default_judge;
    if (!judge) {
      return Error(StatusCode::kInvalid, "llm-rubric needs a judge: a 'judge' provider in the suite, "
                   "defaultTest.options.provider, or 'provider' on the assertion");
    }
    SLUICE_ASSIGN_OR_RETURN(const Reply jr, ask_judge(*judge, rubric_prompt(value_text(value), out)));
    r.judge = {{"text", jr.text}, {"system_fingerprint", jr.system_fingerprint}};
    const std::optional<Json> verdict = find_json(jr.text);
    if (!verdict || !verdict->is_object()) {
      r.reason = "the judge's answer is not a JSON object: " + jr.text.substr(0, 200);
    } else {
      const Json& v = *verdict;
      const bool has_pass = v.contains("pass") && v["pass"].is_boolean();
      const bool judged_pass = has_pass && v["pass"].get<bool>();
      score = v.contains("score") && v["score"].is_number() ? std::clamp(v["score"].get<double>(), 0.0, 1.0)
                                                          : (judged_pass ? 1.0 : 0.0);
      pass = judged_pass && (!a.threshold || score >= *a.threshold);
      r.reason = v.contains("reason") && v["reason"].is_string() ? v["reason"].get<std::string>() : "";
      if (!has_pass) r.reason = "the judge's verdict has no boolean \"pass\" (failed): " + v.dump().substr(0, 200);
    }
  } else {
    return Error(StatusCode::kInvalid, "assertion type '{}' is not implemented", t);
  }
  if (score < 0) score = pass ? 1.0 : 0.0;
  if (a.negate) {
    pass = !pass;
    score = 1.0 - score;
  }
  r.pass = pass;
  r.score = score;
  return r;
}

Result<Grade> grade(const TestCase& test, const Reply& reply, const Json& vars, const std::optional<Provider>& judge,
                    const JudgeFn& ask_judge) {
  Grade g;
  double weighted = 0, weights = 0;
  bool all_pass = true;
  for (const Assertion& a : test.asserts) {
    SLUICE_ASSIGN_OR_RETURN(AssertionResult r, check_assertion(a, reply, vars, judge, ask_judge));
    if (!a.metric_only) {
      weighted += r.score * r.weight;
      weights += r.weight;
      all_pass = all_pass && r.pass;  // weight 0 too: it scales the score, not the check
    }
    g.results.push_back(std::move(r));
  }
  g.score = weights > 0 ? weighted / weights : 1.0;
  g.pass = test.threshold ? g.score >= *test.threshold : all_pass;
  if (test.threshold && !g.pass) {
    g.results.push_back({.type = "threshold", .pass = false, .score = g.score, .weight = 0,
                         .reason = fmt::format("score {:.3f} < threshold {:g}", g.score, *test.threshold)});
  }
  // Checks that could not run: the test fails and scores 0, saying which (a score from the
  // checks that ran alone would count it as well as a test that ran every check).
  for (const std::string& why : test.not_run) {
    g.pass = false;
    g.score = 0;
    g.results.push_back({.type = "not-run", .pass = false, .score = 0, .weight = 0, .reason = why});
  }
  return g;
}

}  // namespace sluice::eval
