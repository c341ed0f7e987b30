// Reading a suite's prompts, assertions and tests (suite_reader.h).
#include "eval/suite_reader.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "common/utf8.h"
#include "eval/assertions.h"
#include "eval/dataset.h"
#include "eval/json_schema.h"
#include "eval/promptfoo.h"
#include "eval/render.h"
#include "eval/yaml_json.h"

namespace sluice::eval::suite_detail {

namespace fs = std::filesystem;

std::string resolve(const std::string& dir, const std::string& path) {
  if (path.empty() || fs::path(path).is_absolute() || dir.empty()) return path;
  return (fs::path(dir) / path).string();
}

Status invalid(std::string message) { return Status::error(std::move(message), StatusCode::kInvalid); }

// `spec[key]` when it is a string, `fallback` when absent or null; another type is the suite's
// mistake (taken as absent, it would change what is run or how it is named without a word).
Result<std::string> string_field(const Json& spec, const char* key, const std::string& where, std::string fallback) {
  if (!spec.contains(key) || spec[key].is_null()) return fallback;
  if (!spec[key].is_string()) return Error(StatusCode::kInvalid, "{}: '{}' must be a string, not {}", where, key, spec[key].dump());
  return spec[key].get<std::string>();
}

// Keys of `spec` not in `known`, as "'a', 'b'".
std::string unknown_keys(const Json& spec, std::span<const std::string_view> known) {
  std::string out;
  for (auto it = spec.begin(); it != spec.end(); ++it) {
    if (std::find(known.begin(), known.end(), it.key()) == known.end()) out += (out.empty() ? "'" : ", '") + it.key() + "'";
  }
  return out;
}


// The first number JSON cannot hold (YAML's .inf, .nan, 1e400) in `j`, as a path; nullopt if none.
std::optional<std::string> non_finite_at(const Json& j, const std::string& path) {
  if (j.is_number_float() && !std::isfinite(j.get<double>())) return path;
  if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) {
      if (auto at = non_finite_at(j[i], fmt::format("{}[{}]", path, i))) return at;
    }
  }
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (auto at = non_finite_at(it.value(), path.empty() ? it.key() : path + "." + it.key())) return at;
    }
  }
  return std::nullopt;
}

// The first var a template in `value` (a string, or lists and mappings of them) names that `vars`
// lacks; "" if none. An undefined var renders as "", so a misspelt `{{ expected }}` would make
// `contains` pass on any answer, or a prompt lose its question. Templates with statements
// ({% %}) or a `default` filter may name vars on purpose: they are left to render.
std::string undefined_var(const Json& value, const Json& vars) {
  if (value.is_array() || value.is_object()) {
    for (const Json& v : value) {
      if (std::string u = undefined_var(v, vars); !u.empty()) return u;
    }
    return "";
  }
  if (!value.is_string()) return "";
  std::string s = value.get_ref<const std::string&>();
  if (s.find("{%") != std::string::npos) return "";
  // Comments ({# ... #}) render nothing: what they name is not used.
  for (size_t at; (at = s.find("{#")) != std::string::npos;) {
    const size_t end = s.find("#}", at + 2);
    s.erase(at, end == std::string::npos ? std::string::npos : end + 2 - at);
  }
  for (size_t at = s.find("{{"); at != std::string::npos; at = s.find("{{", at + 2)) {
    const size_t end = s.find("}}", at + 2);
    if (end == std::string::npos) break;
    const std::string_view expr(s.data() + at + 2, end - at - 2);
    // An expression that may handle a missing var (a default, a test, a condition) is left to it.
    static constexpr std::string_view kHandles[] = {"default", "|d(", "| d(", " if ", " or ", " is ", " and "};
    if (std::ranges::any_of(kHandles, [&](std::string_view h) { return expr.find(h) != std::string_view::npos; })) continue;
    const size_t i = expr.find_first_not_of(" \t-");  // {{- name }} trims the space before
    if (i == std::string_view::npos || !(std::isalpha(static_cast<unsigned char>(expr[i])) || expr[i] == '_')) continue;
    size_t j = i;
    while (j < expr.size() && (std::isalnum(static_cast<unsigned char>(expr[j])) || expr[j] == '_')) ++j;
    const std::string name(expr.substr(i, j - i));
    // Literals, operators and the interpreter's globals are no vars.
    static constexpr std::string_view kNotVars[] = {"true", "false", "none", "True", "False", "None", "not",
                                                   "range", "namespace", "loop", "raise_exception", "dict",
                                                   "lipsum", "cycler", "joiner", "strftime_now"};
    if (std::ranges::find(kNotVars, name) != std::end(kNotVars)) continue;
    if (!vars.is_object() || !vars.contains(name)) return name;
  }
  return "";
}

// The values of the list vars (those a list in `listed`) that `vars` is one combination of, as
// written (a file:// value by its name), on one line and cut at a character boundary.
std::string combination_name(const Json& listed, const Json& vars) {
  std::string name;
  for (auto it = listed.begin(); it != listed.end(); ++it) {
    if (!it.value().is_array() || !vars.contains(it.key()) || vars[it.key()].is_array()) continue;
    const Json& v = vars[it.key()];
    std::string text = v.is_string() ? v.get<std::string>() : v.dump();
    std::replace_if(text.begin(), text.end(), [](char c) { return c == '\n' || c == '\r' || c == '\t'; }, ' ');
    if (text.size() > 40) {
      text.resize(37);
      text.resize(text.size() - utf8_incomplete_suffix_length(text));
      text += "...";
    }
    name += (name.empty() ? "" : ", ") + it.key() + "=" + text;
  }
  return name;
}

Result<std::string> Reader::file_text(const std::string& path) {
  if (auto it = files.find(path); it != files.end()) return it->second;
  SLUICE_ASSIGN_OR_RETURN(std::string text, read_file(resolve(dir, path)));
  suite.content += "\n--- " + path + "\n" + text;
  files.emplace(path, text);
  return text;
}

Result<std::vector<Json>> Reader::rows(const std::string& path) {
  const std::string full = resolve(dir, path);
  SLUICE_ASSIGN_OR_RETURN(std::string text, read_file(full));
  suite.content += "\n--- " + path + "\n" + text;
  if (path.ends_with(".yaml") || path.ends_with(".yml") || path.ends_with(".json")) {
    auto doc = parse_yaml(text);
    if (!doc) return Error(doc.error().with_context(full));
    if (!doc->is_array()) return Error(StatusCode::kInvalid, "{}: must hold a list", full);
    if (auto at = non_finite_at(*doc, "")) {
      return Error(StatusCode::kInvalid, "{}: '{}' is infinite or NaN (.inf, .nan or a number past 1e308): give a "
                   "finite number", full, *at);
    }
    return std::vector<Json>(doc->begin(), doc->end());
  }
  if (path.ends_with(".jsonl") || path.ends_with(".ndjson")) return parse_jsonl(text, full);
  if (path.ends_with(".csv")) return parse_csv(text, full);
  return Error(StatusCode::kInvalid, "'{}': expected .jsonl, .csv, .yaml or .json", path);
}

// One prompt, or several when it names a text file that holds several ("---" lines between).
Result<std::vector<Prompt>> Reader::prompts(const Json& spec, size_t index) {
  Prompt p;
  p.label = fmt::format("prompt {}", index + 1);
  std::string raw;
  if (spec.is_string()) {
    raw = spec.get<std::string>();
  } else if (spec.is_object()) {
    if (spec.contains("label") && spec["label"].is_string()) p.label = spec["label"];
    else if (spec.contains("id") && spec["id"].is_string()) p.label = spec["id"];
    if (spec.contains("messages")) {
      if (!spec["messages"].is_array() || spec["messages"].empty()) {
        return Error(StatusCode::kInvalid, "prompt '{}': 'messages' must be a non-empty list", p.label);
      }
      for (const Json& m : spec["messages"]) {
        if (!m.is_object() || !m.contains("role") || !m.contains("content") || !m["content"].is_string()) {
          return Error(StatusCode::kInvalid, "prompt '{}': each message needs a role and a string content", p.label);
        }
      }
      p.messages = spec["messages"];
      return std::vector<Prompt>{std::move(p)};
    }
    const Json* r = spec.contains("raw") ? &spec["raw"] : spec.contains("content") ? &spec["content"] : nullptr;
    // {id: file://PATH, label: L}: promptfoo's prompt object naming a file.
    if (!r && spec.contains("id") && spec["id"].is_string() && spec["id"].get<std::string>().starts_with("file://")) {
      r = &spec["id"];
    }
    if (!r || !r->is_string()) return Error(StatusCode::kInvalid, "prompt '{}': needs 'raw' text or 'messages'", p.label);
    raw = r->get<std::string>();
  } else {
    return Error(StatusCode::kInvalid, "prompt {} must be a string or an object", index + 1);
  }
  std::vector<std::string> texts = {raw};
  if (raw.starts_with("file://")) {
    const std::string path = raw.substr(7);
    if (!spec.is_object() || !spec.contains("label")) p.label = path;
    SLUICE_ASSIGN_OR_RETURN(raw, file_text(path));
    texts = path.ends_with(".txt") ? split_prompts(raw) : std::vector<std::string>{raw};  // .txt only, as promptfoo
  }
  std::vector<Prompt> out;
  for (size_t k = 0; k < texts.size(); ++k) {
    Prompt one = p;
    if (texts.size() > 1) one.label = fmt::format("{} [{}]", p.label, k + 1);
    // A prompt that is a JSON list of messages is a chat prompt (promptfoo's convention).
    const std::string& text = texts[k];
    const auto first = text.find_first_not_of(" \t\r\n");
    Json m = first != std::string::npos && text[first] == '[' ? Json::parse(text, nullptr, false) : Json();
    if (!m.is_discarded() && m.is_array() && !m.empty() && m[0].is_object() && m[0].contains("role")) {
      one.messages = std::move(m);
    } else {
      one.text = text;
    }
    out.push_back(std::move(one));
  }
  return out;
}

Result<Assertion> Reader::assertion(const Json& spec, const std::string& where) {
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    return Error(StatusCode::kInvalid, "{}: an assertion needs a 'type'", where);
  }
  Assertion a;
  a.type = spec["type"];
  if (a.type.starts_with("not-")) {
    a.negate = true;
    a.type = a.type.substr(4);
  }
  if (spec.contains("value")) a.value = spec["value"];
  if (spec.contains("weight")) {
    if (!spec["weight"].is_number() || !(spec["weight"].get<double>() >= 0)) {
      return Error(StatusCode::kInvalid, "{}: 'weight' must be a number >= 0", where);
    }
    a.weight = spec["weight"];
  }
  if (spec.contains("threshold") && !spec["threshold"].is_null()) {
    if (!spec["threshold"].is_number() || !std::isfinite(spec["threshold"].get<double>())) {
      return Error(StatusCode::kInvalid, "{}: 'threshold' must be a finite number", where);
    }
    a.threshold = spec["threshold"].get<double>();
  }
  // A JSON schema given as text (inline JSON or YAML, or file://PATH, as promptfoo takes
  // it) is read now; a schema that a template fills is not supported (it was once skipped,
  // and any JSON passed).
  const bool json_type = a.type == "is-json" || a.type == "contains-json" || a.type == "json-schema";
  if (json_type && a.value.is_string()) {
    std::string text = a.value.get<std::string>();
    if (text.find("{{") != std::string::npos) {
      return Error(StatusCode::kInvalid, "{}: a {} schema cannot be a template", where, a.type);
    }
    const bool from_file = text.starts_with("file://");
    if (from_file) {
      SLUICE_ASSIGN_OR_RETURN(text, file_text(text.substr(7)));
    }
    auto schema = parse_yaml(text);
    if (!schema || !(schema->is_object() || schema->is_boolean())) {
      return Error(StatusCode::kInvalid, "{}: the {} schema {} is not a JSON/YAML object", where, a.type,
                   from_file ? a.value.get<std::string>() : "given");
    }
    a.value = std::move(*schema);
  }
  // A pattern with no template in it is compiled now: a bad one is the suite's error, found
  // before any request is sent.
  if (a.type == "regex" && a.value.is_string() && a.value.get<std::string>().find("{{") == std::string::npos) {
    if (auto ok = regex_search(a.value.get<std::string>(), ""); !ok) {
      return Error(StatusCode::kInvalid, "{}: {}", where, ok.error().message());
    }
  }
  SLUICE_ASSIGN_OR_RETURN(a.metric, string_field(spec, "metric", where));
  if (spec.contains("metricOnly")) {
    if (!spec["metricOnly"].is_boolean()) return Error(StatusCode::kInvalid, "{}: 'metricOnly' must be true or false", where);
    a.metric_only = spec["metricOnly"];
  }
  if (spec.contains("provider") && !spec["provider"].is_null()) {
    SLUICE_ASSIGN_OR_RETURN(Provider judge, parse_provider(spec["provider"]));
    a.judge = std::move(judge);
  }
  for (auto it = spec.begin(); it != spec.end(); ++it) {
    static constexpr std::string_view kKeys[] = {"type", "value", "weight", "threshold", "metric", "metricOnly",
                                                  "provider"};
    if (std::find(std::begin(kKeys), std::end(kKeys), it.key()) == std::end(kKeys)) {
      suite.not_run.push_back(fmt::format("{}: assertion field '{}' is not supported (the test fails)", where, it.key()));
    }
  }
  // What grading would find only once every answer is in: found now, before any request.
  if (Status st = check_assertion_spec(a); !st) {
    static constexpr std::string_view kFields[] = {"type", "value", "weight", "threshold", "metric", "metricOnly",
                                                   "provider"};
    const std::string unknown = unknown_keys(spec, kFields);
    return Error(StatusCode::kInvalid, "{}: {}{}", where, st.message(),
                 unknown.empty() ? "" : fmt::format(" (its {} is not a field)", unknown));
  }
  return a;
}

// Appends the assertions of `list` that can run; lists the others in not_run.
Status Reader::assertions(const Json& list, const std::string& where, std::vector<Assertion>& out) {
  if (list.is_null()) return Status::ok();
  if (!list.is_array()) return invalid(where + ": 'assert' must be a list");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string w = fmt::format("{}, assertion {}", where, i + 1);
    // A type sluice lacks (javascript, similar, assert-set, ...) is listed before its fields are read.
    if (list[i].is_object() && list[i].contains("type") && list[i]["type"].is_string()) {
      const std::string& type = list[i]["type"].get_ref<const std::string&>();
      if (!is_known_assertion(type.starts_with("not-") ? type.substr(4) : type)) {
        suite.not_run.push_back(fmt::format("{}: assertion type '{}' is not implemented (the test fails)", w, type));
        continue;
      }
    }
    auto a = assertion(list[i], w);
    if (!a) return a.error();
    out.push_back(std::move(*a));
  }
  return Status::ok();
}

// `v` as a var: "file://PATH" is replaced by the file (parsed when .json, .yaml or .yml).
Status Reader::var_file(Json& v, const std::string& where) {
  if (!v.is_string() || !v.get<std::string>().starts_with("file://")) return Status::ok();
  const std::string path = v.get<std::string>().substr(7);
  for (std::string_view script : {".js", ".mjs", ".cjs", ".ts", ".py"}) {
    if (path.ends_with(script)) return invalid(fmt::format("{} is a script ({}), which sluice does not run", where, path));
  }
  if (path.find_first_of("*?[") != std::string::npos) return invalid(fmt::format("{}: globs are not supported ({})", where, path));
  ASSIGN_OR_FAIL(std::string text, file_text(path));
  if (path.ends_with(".json") || path.ends_with(".yaml") || path.ends_with(".yml")) {
    auto parsed = parse_yaml(text);
    if (!parsed) return invalid(fmt::format("{}: {}: {}", where, path, parsed.error().message()));
    if (auto at = non_finite_at(*parsed, "")) return invalid(fmt::format("{}: {}: '{}' is infinite or NaN", where, path, *at));
    v = std::move(*parsed);
  } else {
    v = std::move(text);
  }
  return Status::ok();
}

// Every var the prompts and a test's assertions name is one of its vars (undefined_var).
Status Reader::check_vars(const TestCase& t, const std::string& where) {
  auto names = [&t]() {
    std::string out;
    for (auto it = t.vars.begin(); it != t.vars.end(); ++it) out += (out.empty() ? "" : ", ") + it.key();
    return out.empty() ? std::string("none") : out;
  };
  for (const Prompt& p : suite.prompts) {
    const std::string u = undefined_var(p.messages.is_array() ? p.messages : Json(p.text), t.vars);
    if (!u.empty()) {
      return invalid(fmt::format("{}: prompt '{}' names '{{{{ {} }}}}', which is not a var of the test (its vars: {})",
                                 where, p.label, u, names()));
    }
  }
  for (size_t i = 0; i < t.asserts.size(); ++i) {
    if (const std::string u = undefined_var(t.asserts[i].value, t.vars); !u.empty()) {
      return invalid(fmt::format("{}: assertion '{}' names '{{{{ {} }}}}', which is not a var of the test (its vars: "
                                 "{})", where, t.asserts[i].type, u, names()));
    }
  }
  return Status::ok();
}

// `spec[key]` as a number in [0, 1], into `out`; absent or null: `out` untouched.
static Status unit_interval(const Json& spec, const char* key, const std::string& where, std::string_view what,
                            std::optional<double>& out) {
  if (!spec.contains(key) || spec[key].is_null()) return Status::ok();
  const Json& v = spec[key];
  if (!v.is_number() || !(v.get<double>() >= 0 && v.get<double>() <= 1)) {
    return invalid(fmt::format("{}: '{}' must be a number in [0, 1]{}", where, key, what));
  }
  out = v.get<double>();
  return Status::ok();
}

// A test's threshold (the weighted mean score a pass needs) and passFraction (the share of
// repeated samples that must pass), or defaultTest's: each a number in [0, 1].
Status Reader::threshold(const Json& spec, const std::string& where, TestCase& t) {
  std::optional<double> v;
  RETURN_IF_FAILED(unit_interval(spec, "threshold", where, " (the weighted mean score a pass needs)", v));
  if (v) t.threshold = *v;
  return Status::ok();
}

Status Reader::pass_fraction(const Json& spec, const std::string& where, TestCase& t) {
  std::optional<double> v;
  RETURN_IF_FAILED(unit_interval(spec, "passFraction", where, "", v));
  if (v) t.pass_fraction = *v;
  return Status::ok();
}

Status Reader::test(const Json& spec, const TestCase& defaults, const std::string& where) {
  if (!spec.is_object()) return invalid(where + ": a test must be a mapping");
  TestCase t = defaults;
  const size_t not_run_before = suite.not_run.size();
  ASSIGN_OR_FAIL(t.description, string_field(spec, "description", where));
  if (t.description.empty()) t.description = where;
  if (spec.contains("vars") && !spec["vars"].is_null()) {
    if (!spec["vars"].is_object()) return invalid(where + ": 'vars' must be a mapping");
    for (auto it = spec["vars"].begin(); it != spec["vars"].end(); ++it) t.vars[it.key()] = it.value();
  }
  if (spec.contains("assert")) RETURN_IF_FAILED(assertions(spec["assert"], where, t.asserts));
  RETURN_IF_FAILED(threshold(spec, where, t));
  RETURN_IF_FAILED(pass_fraction(spec, where, t));
  // promptfoo's reserved CSV columns: __expected, __expected1.. (an assertion each), and the rest.
  if (spec.contains("vars") && spec["vars"].is_object()) {
    ReservedColumns cols = take_reserved_columns(t.vars, is_known_assertion);
    if (!cols.errors.empty()) return invalid(where + ": " + cols.errors.front());
    if (!cols.description.empty() && !spec.contains("description")) t.description = cols.description;
    if (cols.threshold) {
      if (!(*cols.threshold >= 0 && *cols.threshold <= 1)) return invalid(where + ": '__threshold' must be a number in [0, 1]");
      t.threshold = cols.threshold;
    }
    for (const std::string& why : cols.not_supported) {
      suite.not_run.push_back(fmt::format("{}: {} (the test fails)", where, why));
    }
    RETURN_IF_FAILED(assertions(Json(cols.asserts), where, t.asserts));
  }
  for (auto it = spec.begin(); it != spec.end(); ++it) {
    // metadata: labels for people, no effect on the result.
    static constexpr std::string_view kKeys[] = {"description", "vars", "assert", "threshold", "passFraction",
                                                 "metadata"};
    if (std::find(std::begin(kKeys), std::end(kKeys), it.key()) == std::end(kKeys)) {
      suite.not_run.push_back(fmt::format("{}: test field '{}' is not supported (the test fails)", where, it.key()));
    }
  }
  t.not_run.insert(t.not_run.end(), suite.not_run.begin() + static_cast<std::ptrdiff_t>(not_run_before),
                   suite.not_run.end());
  // A var that is a list of strings runs the test once per value (every combination), as
  // promptfoo does; then a var "file://PATH" holds the file (parsed when .json/.yaml), so a
  // file holding a list stays one value.
  std::optional<std::vector<Json>> combinations = expand_list_vars(t.vars, kMaxCombinations);
  if (!combinations) {
    return invalid(fmt::format("{}: its list vars make more than {} combinations", where, kMaxCombinations));
  }
  for (Json& vars : *combinations) {
    TestCase one = t;
    if (combinations->size() > 1) one.combination = combination_name(t.vars, vars);  // before files are read
    for (auto it = vars.begin(); it != vars.end(); ++it) {
      RETURN_IF_FAILED(var_file(it.value(), fmt::format("{}: var '{}'", where, it.key())));
    }
    one.vars = std::move(vars);
    RETURN_IF_FAILED(check_vars(one, one.combination.empty() ? where : where + " [" + one.combination + "]"));
    suite.tests.push_back(std::move(one));
  }
  return Status::ok();
}

}  // namespace sluice::eval::suite_detail
