// A suite put together from its parts (suite_reader.h), and the providers it names.
#include "eval/suite.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <span>

#include <fmt/format.h>

#include "common/utf8.h"
#include "eval/assertions.h"
#include "eval/dataset.h"
#include "eval/json_schema.h"
#include "eval/promptfoo.h"
#include "eval/render.h"
#include "eval/suite_reader.h"
#include "eval/yaml_json.h"

namespace sluice::eval {
namespace {

namespace fs = std::filesystem;
using suite_detail::invalid;
using suite_detail::non_finite_at;
using suite_detail::string_field;

constexpr std::string_view kAssertionTypes[] = {
    "equals", "contains", "icontains", "contains-any", "contains-all", "icontains-any", "icontains-all",
    "starts-with", "regex", "is-json", "contains-json", "json-schema", "levenshtein", "numeric", "latency",
    "max-tokens", "length", "logprob", "perplexity", "llm-rubric", "finish-reason"};

// Top-level keys this reader uses, and promptfoo keys that change nothing about the answers.
constexpr std::string_view kSuiteKeys[] = {"description", "providers", "prompts", "tests", "defaultTest", "datasets",
                                           "likelihood", "evaluateOptions", "judge", "sharing", "outputPath",
                                           "writeLatestResults", "tags", "$schema"};

}  // namespace

namespace suite_detail {

// defaultTest: merged into every test (`defaults`); what it holds that cannot run is listed.
Status Reader::default_test(const Json& d, TestCase& defaults) {
  if (!d.is_object()) return invalid("'defaultTest' must be a mapping");
  if (d.contains("vars") && !d["vars"].is_null()) {
    if (!d["vars"].is_object()) return invalid("defaultTest: 'vars' must be a mapping");
    defaults.vars = d["vars"];
  }
  const size_t not_run_before = suite.not_run.size();
  if (d.contains("assert")) RETURN_IF_FAILED(assertions(d["assert"], "defaultTest", defaults.asserts));
  defaults.not_run.assign(suite.not_run.begin() + static_cast<std::ptrdiff_t>(not_run_before), suite.not_run.end());
  RETURN_IF_FAILED(threshold(d, "defaultTest", defaults));
  RETURN_IF_FAILED(pass_fraction(d, "defaultTest", defaults));
  if (d.contains("options") && d["options"].is_object() && d["options"].contains("provider") && !suite.judge) {
    ASSIGN_OR_FAIL(Provider judge, parse_provider(d["options"]["provider"]));
    suite.judge = std::move(judge);
  }
  // What else defaultTest holds would change every test (options.transform, prefix, suffix,
  // postprocess): listed, and every test fails.
  const size_t listed = defaults.not_run.size();
  for (auto it = d.begin(); it != d.end(); ++it) {
    static constexpr std::string_view kKeys[] = {"vars", "assert", "threshold", "passFraction", "options", "metadata",
                                                 "description"};
    if (std::find(std::begin(kKeys), std::end(kKeys), it.key()) == std::end(kKeys)) {
      defaults.not_run.push_back(fmt::format("defaultTest field '{}' is not supported (every test fails)", it.key()));
    }
  }
  if (d.contains("options") && d["options"].is_object()) {
    for (auto it = d["options"].begin(); it != d["options"].end(); ++it) {
      if (it.key() != "provider") {
        defaults.not_run.push_back(fmt::format("defaultTest option '{}' is not supported (every test fails)", it.key()));
      }
    }
  }
  suite.not_run.insert(suite.not_run.end(), defaults.not_run.begin() + static_cast<std::ptrdiff_t>(listed),
                       defaults.not_run.end());
  return Status::ok();
}

// `tests`: a list (of tests, or of file:// sources of rows) or one file:// source.
Status Reader::tests(const Json& t, const TestCase& defaults) {
  std::vector<Json> specs;
  std::vector<bool> from_file;  // rows of a file:// source, which may be flat (CSV)
  if (t.is_string() && t.get<std::string>().starts_with("file://")) {
    ASSIGN_OR_FAIL(specs, rows(t.get<std::string>().substr(7)));
    from_file.assign(specs.size(), true);
  } else if (t.is_array()) {
    for (const Json& e : t) {
      if (e.is_string() && e.get<std::string>().starts_with("file://")) {
        ASSIGN_OR_FAIL(std::vector<Json> more, rows(e.get<std::string>().substr(7)));
        specs.insert(specs.end(), more.begin(), more.end());
        from_file.resize(specs.size(), true);
      } else {
        specs.push_back(e);
        from_file.push_back(false);
      }
    }
  } else {
    return invalid("'tests' must be a list or \"file://PATH\"");
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    // A CSV row is flat: its columns are the vars. (A test written in the suite is not: a
    // misspelt key there is reported, not taken for a var.)
    Json spec = specs[i];
    if (from_file[i] && spec.is_object() && !spec.contains("vars") && !spec.contains("assert") &&
        !spec.contains("description")) {
      spec = Json{{"vars", spec}};
    }
    RETURN_IF_FAILED(test(spec, defaults, fmt::format("test {}", i + 1)));
  }
  return Status::ok();
}

Status Reader::dataset(const Json& spec, const TestCase& defaults, size_t index) {
  const std::string where = fmt::format("dataset {}", index + 1);
  if (!spec.is_object() || !spec.contains("path") || !spec["path"].is_string()) {
    return invalid(where + ": needs a 'path'");
  }
  static constexpr std::string_view kKeys[] = {"path", "doc_to_text", "doc_to_target", "limit", "assert"};
  if (const std::string unknown = unknown_keys(spec, kKeys); !unknown.empty()) {
    return invalid(fmt::format("{}: {} is not a dataset field (they are path, doc_to_text, doc_to_target, limit, "
                               "assert)", where, unknown));
  }
  ASSIGN_OR_FAIL(const std::string text, string_field(spec, "doc_to_text", where));
  ASSIGN_OR_FAIL(const std::string target, string_field(spec, "doc_to_target", where));
  int64_t limit = -1;
  if (spec.contains("limit") && !spec["limit"].is_null()) {
    if (!spec["limit"].is_number_integer() || spec["limit"].get<int64_t>() < 1) {
      return invalid(fmt::format("{}: 'limit' must be an integer >= 1 (the rows to take), not {}", where, spec["limit"].dump()));
    }
    limit = spec["limit"].get<int64_t>();
  }
  auto rows_or = rows(spec["path"].get<std::string>());
  if (!rows_or) return rows_or.error();
  std::vector<Assertion> asserts;
  if (spec.contains("assert")) RETURN_IF_FAILED(assertions(spec["assert"], where, asserts));
  for (size_t r = 0; r < rows_or->size() && (limit < 0 || static_cast<int64_t>(r) < limit); ++r) {
    TestCase t = defaults;
    const Json& row = (*rows_or)[r];
    const std::string w = fmt::format("{} row {}", spec["path"].get<std::string>(), r + 1);
    if (!row.is_object()) return invalid(w + ": a row must be a mapping of columns");
    for (auto it = row.begin(); it != row.end(); ++it) t.vars[it.key()] = it.value();
    if (!text.empty()) {
      ASSIGN_OR_FAIL(std::string s, render(text, t.vars));
      t.vars["text"] = s;
    }
    if (!target.empty()) {
      ASSIGN_OR_FAIL(std::string s, render(target, t.vars));
      t.vars["target"] = s;
    }
    t.description = row.contains("id") ? fmt::format("{} {}", spec["path"].get<std::string>(), row["id"].dump()) : w;
    t.asserts.insert(t.asserts.end(), asserts.begin(), asserts.end());
    // Without prompts of the suite's own, each row's "text" is the prompt.
    if (default_prompt && !t.vars.contains("text")) {
      return invalid(fmt::format("{}: has no 'text' column for the prompt (map one with doc_to_text, or give prompts)", w));
    }
    RETURN_IF_FAILED(check_vars(t, w));
    suite.tests.push_back(std::move(t));
  }
  return Status::ok();
}

Status Reader::likelihood(const Json& spec, size_t index) {
  const std::string task_where = fmt::format("likelihood task {}", index + 1);
  if (!spec.is_object()) return invalid(task_where + ": must be a mapping (name, type, path or items)");
  static constexpr std::string_view kKeys[] = {"name", "type", "path", "items"};
  if (const std::string unknown = unknown_keys(spec, kKeys); !unknown.empty()) {
    return invalid(fmt::format("{}: {} is not a likelihood task field (they are name, type, path, items)", task_where, unknown));
  }
  LikelihoodTask task;
  ASSIGN_OR_FAIL(task.name, string_field(spec, "name", task_where, fmt::format("likelihood {}", index + 1)));
  ASSIGN_OR_FAIL(task.type, string_field(spec, "type", task_where));
  if (task.type != "multiple-choice" && task.type != "perplexity") {
    return invalid(fmt::format("likelihood task '{}': type must be multiple-choice or perplexity", task.name));
  }
  // Results are stored and compared by the task's name: two alike would be merged into one.
  for (const LikelihoodTask& other : suite.likelihood) {
    if (other.name == task.name) return invalid(fmt::format("two likelihood tasks are named '{}': give each its own name", task.name));
  }
  std::vector<Json> items;
  ASSIGN_OR_FAIL(const std::string path, string_field(spec, "path", task_where));
  if (!path.empty()) {
    auto r = rows(path);
    if (!r) return r.error();
    items = std::move(*r);
  }
  if (spec.contains("items")) {
    if (!spec["items"].is_array()) return invalid(fmt::format("likelihood task '{}': 'items' must be a list", task.name));
    items.insert(items.end(), spec["items"].begin(), spec["items"].end());
  }
  if (items.empty()) return invalid(fmt::format("likelihood task '{}' has no items (path or items)", task.name));
  for (size_t i = 0; i < items.size(); ++i) {
    const Json& row = items[i];
    const std::string where = fmt::format("likelihood task '{}', item {}", task.name, i + 1);
    if (!row.is_object()) return invalid(where + ": must be a mapping");
    LikelihoodItem item;
    item.id = row.contains("id") ? (row["id"].is_string() ? row["id"].get<std::string>() : row["id"].dump())
                                 : std::to_string(i + 1);
    if (task.type == "perplexity") {
      if (!row.contains("text") || !row["text"].is_string() || row["text"].get<std::string>().empty()) {
        return invalid(where + ": needs a non-empty 'text'");
      }
      item.text = row["text"];
    } else {
      if (!row.contains("context") || !row["context"].is_string()) return invalid(where + ": needs a 'context'");
      if (!row.contains("choices") || !row["choices"].is_array() || row["choices"].size() < 2) {
        return invalid(where + ": needs 'choices', a list of at least two strings");
      }
      item.context = row["context"];
      for (const Json& c : row["choices"]) {
        if (!c.is_string() || c.get<std::string>().empty()) return invalid(where + ": every choice must be a non-empty string");
        item.choices.push_back(c);
      }
      const Json gold = row.contains("gold") ? row["gold"] : Json();
      int64_t g = gold.is_number_integer() ? gold.get<int64_t>() : -1;
      if (gold.is_string()) {  // "2" as datasets write it; "2x" or a number past int64 is not an index
        const std::string& t = gold.get_ref<const std::string&>();
        if (auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), g); ec != std::errc() || p != t.data() + t.size()) g = -1;
      }
      if (g < 0 || g >= static_cast<int64_t>(item.choices.size())) {
        return invalid(where + ": 'gold' must be the index of the right choice");
      }
      item.gold = static_cast<int32_t>(g);
    }
    task.items.push_back(std::move(item));
  }
  suite.likelihood.push_back(std::move(task));
  return Status::ok();
}

}  // namespace suite_detail

bool is_known_assertion(std::string_view type) {
  return std::find(std::begin(kAssertionTypes), std::end(kAssertionTypes), type) != std::end(kAssertionTypes);
}

Status check_request_field(const std::string& key, const Json& value) {
  // The run writes these itself (the rendered prompt, the provider's model, one whole answer);
  // one set here would replace every test's prompt, or be read as no answer at all.
  static constexpr std::string_view kOwn[] = {"prompt", "messages", "model", "stream", "n", "echo"};
  // (What the run sends anyway is harmless: n 1, stream and echo false.)
  const bool as_sent = (key == "n" && value == 1) || ((key == "stream" || key == "echo") && value == false);
  if (std::find(std::begin(kOwn), std::end(kOwn), key) != std::end(kOwn) && !as_sent) {
    return invalid(fmt::format("'{}' is set by the run itself (from the prompts, the provider's id or --model), not "
                               "as a request field", key));
  }
  // Repeats send seed, seed + 1, ...: another type would send every repeat with one seed.
  if (key == "seed" && !value.is_number_integer()) {
    return invalid(fmt::format("'seed' must be an integer, not {}", value.dump()));
  }
  return Status::ok();
}

Result<Provider> parse_provider(const Json& spec) {
  Provider p;
  std::string id;
  const Json* config = nullptr;
  if (spec.is_string()) {
    id = spec.get<std::string>();
  } else if (spec.is_object() && spec.contains("id") && spec["id"].is_string()) {
    id = spec["id"];
    SLUICE_ASSIGN_OR_RETURN(p.label, string_field(spec, "label", fmt::format("provider '{}'", id)));
    if (spec.contains("config") && !spec["config"].is_null()) {
      if (!spec["config"].is_object()) return Error(StatusCode::kInvalid, "provider '{}': 'config' must be a mapping", id);
      config = &spec["config"];
    }
    for (auto it = spec.begin(); it != spec.end(); ++it) {
      // delay spaces requests out: no answer changes. transform, prompts and the rest would.
      static constexpr std::string_view kKeys[] = {"id", "label", "config", "delay"};
      if (std::find(std::begin(kKeys), std::end(kKeys), it.key()) == std::end(kKeys)) {
        return Error(StatusCode::kUnsupported, "provider '{}': '{}' is not supported", id, it.key());
      }
    }
  } else {
    return Error(StatusCode::kInvalid, "a provider must be a string id or an object with an 'id'");
  }
  // openai:chat:MODEL, openai:completion:MODEL; openai:MODEL is chat (promptfoo's shorthand).
  if (!id.starts_with("openai:")) {
    return Error(StatusCode::kUnsupported, "provider '{}' is not an OpenAI-compatible one (openai:chat:MODEL or "
                 "openai:completion:MODEL; point apiBaseUrl at any compatible server)", id);
  }
  std::string rest = id.substr(7);
  if (rest.starts_with("chat:")) {
    p.api = "chat", rest = rest.substr(5);
  } else if (rest.starts_with("completion:")) {
    p.api = "completion", rest = rest.substr(11);
  } else if (rest.starts_with("embedding:") || rest.starts_with("image:") || rest.starts_with("assistant:")) {
    return Error(StatusCode::kUnsupported, "provider '{}': only chat and completion providers are supported", id);
  }
  p.model = rest;
  if (p.label.empty()) p.label = id;
  const char* env_base = std::getenv("OPENAI_BASE_URL");
  if (!env_base) env_base = std::getenv("OPENAI_API_BASE_URL");
  p.base_url = env_base ? env_base : "https://api.openai.com/v1";
  p.base_url_default = true;  // (the environment is not the suite: --base-url moves it)
  p.api_key_env = "OPENAI_API_KEY";
  if (config) {
    for (auto it = config->begin(); it != config->end(); ++it) {
      const std::string& k = it.key();
      if (k == "apiBaseUrl" || k == "apiHost") {
        if (!it->is_string()) return Error(StatusCode::kInvalid, "provider '{}': '{}' must be a string", id, k);
        p.base_url = it->get<std::string>();
        p.base_url_default = false;
        if (k == "apiHost") p.base_url = "https://" + p.base_url + "/v1";
      } else if (k == "apiKeyEnvar") {
        p.api_key_env = it->is_string() ? it->get<std::string>() : "";
      } else if (k == "apiKey") {
        return Error(StatusCode::kInvalid, "provider '{}': put the key in the environment (apiKeyEnvar), not in the "
                     "suite", id);
      } else {
        SLUICE_RETURN_IF_ERROR(check_request_field(k, *it).with_context(fmt::format("provider '{}'", id)));
        p.params[k] = *it;  // a request field: temperature, max_tokens, seed, stop, ...
      }
    }
  }
  while (p.base_url.ends_with('/')) p.base_url.pop_back();
  return p;
}

Result<Suite> parse_suite(const Json& doc, const std::string& dir) {
  if (!doc.is_object()) return Error(StatusCode::kInvalid, "a suite must be a mapping");
  // A weight, threshold or request field of infinity would reach the store and the requests as
  // null: refused where it is written.
  if (auto at = non_finite_at(doc, "")) {
    return Error(StatusCode::kInvalid, "'{}' is infinite or NaN (.inf, .nan or a number past 1e308): give a finite "
                 "number", *at);
  }
  suite_detail::Reader r;
  r.dir = dir;
  SLUICE_ASSIGN_OR_RETURN(r.suite.description, string_field(doc, "description", "the suite"));
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (std::find(std::begin(kSuiteKeys), std::end(kSuiteKeys), it.key()) == std::end(kSuiteKeys)) {
      r.suite.not_run.push_back(fmt::format("suite key '{}' is not supported (ignored)", it.key()));
    }
  }
  const Json providers = doc.value("providers", Json::array());
  for (const Json& spec : providers.is_array() ? providers : Json::array({providers})) {
    // A provider sluice cannot run (another API) is listed; a mistake in one it can is the suite's.
    auto p = parse_provider(spec);
    if (!p && p.error().code() != StatusCode::kUnsupported) return Error(p.error());
    if (!p) {
      r.suite.not_run.push_back(p.error().message());
      continue;
    }
    r.suite.providers.push_back(std::move(*p));
  }
  if (doc.contains("judge")) {
    SLUICE_ASSIGN_OR_RETURN(Provider judge, parse_provider(doc["judge"]));
    r.suite.judge = std::move(judge);
  }
  const Json prompts = doc.value("prompts", Json::array());
  for (const Json& spec : prompts.is_array() ? prompts : Json::array({prompts})) {
    SLUICE_ASSIGN_OR_RETURN(std::vector<Prompt> some, r.prompts(spec, r.suite.prompts.size()));
    for (Prompt& p : some) r.suite.prompts.push_back(std::move(p));
  }
  TestCase defaults;
  // A suite of datasets without prompts of its own: each row's (or test's) "text" is the prompt,
  // there before the tests are read (their vars are checked against the prompts).
  r.default_prompt = doc.contains("datasets") && r.suite.prompts.empty();
  if (r.default_prompt) r.suite.prompts.push_back({"text", "{{ text }}", nullptr});
  if (doc.contains("defaultTest")) SLUICE_RETURN_IF_ERROR(r.default_test(doc["defaultTest"], defaults));
  if (doc.contains("tests")) SLUICE_RETURN_IF_ERROR(r.tests(doc["tests"], defaults));
  if (doc.contains("datasets")) {
    if (!doc["datasets"].is_array()) return Error(StatusCode::kInvalid, "'datasets' must be a list");
    for (size_t i = 0; i < doc["datasets"].size(); ++i) SLUICE_RETURN_IF_ERROR(r.dataset(doc["datasets"][i], defaults, i));
  }
  if (doc.contains("likelihood")) {
    if (!doc["likelihood"].is_array()) return Error(StatusCode::kInvalid, "'likelihood' must be a list");
    for (size_t i = 0; i < doc["likelihood"].size(); ++i) SLUICE_RETURN_IF_ERROR(r.likelihood(doc["likelihood"][i], i));
  }
  if (doc.contains("evaluateOptions") && !doc["evaluateOptions"].is_null()) {
    const Json& o = doc["evaluateOptions"];
    if (!o.is_object()) return Error(StatusCode::kInvalid, "'evaluateOptions' must be a mapping");
    // promptfoo's options that change no answer (how fast, how shown) are taken and ignored.
    for (auto it = o.begin(); it != o.end(); ++it) {
      static constexpr std::string_view kKeys[] = {"repeat", "maxConcurrency", "delay", "showProgressBar", "cache"};
      if (std::find(std::begin(kKeys), std::end(kKeys), it.key()) == std::end(kKeys)) {
        r.suite.not_run.push_back(fmt::format("evaluateOptions.{} is not supported (ignored)", it.key()));
      }
    }
    if (o.contains("repeat")) {
      if (!o["repeat"].is_number_integer() || o["repeat"] < 1 || o["repeat"] > 1000) {
        return Error(StatusCode::kInvalid, "'evaluateOptions.repeat' must be an integer in [1, 1000]");
      }
      r.suite.repeat = o["repeat"];
    }
  }
  if (!r.suite.tests.empty() && r.suite.prompts.empty()) {
    return Error(StatusCode::kInvalid, "the suite has tests but no prompts");
  }
  if (r.suite.tests.empty() && r.suite.likelihood.empty()) {
    return Error(StatusCode::kInvalid, "the suite has nothing to run (no tests, datasets or likelihood tasks)");
  }
  r.suite.content = doc.dump() + r.suite.content;
  return std::move(r.suite);
}

Result<Suite> load_suite(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(std::string text, read_file(path));
  auto doc = parse_yaml(text);
  if (!doc) return Error(doc.error().with_context(path));
  auto suite = parse_suite(*doc, fs::path(path).parent_path().string());
  if (!suite) return Error(suite.error().with_context(path));
  suite->path = path;
  return suite;
}

}  // namespace sluice::eval
