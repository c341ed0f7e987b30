#include "eval/promptfoo.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>

#include <fmt/format.h>

namespace sluice::eval {

namespace {

// promptfoo assertion types sluice does not implement: written in a cell they still name a type,
// so the test reports it as not implemented instead of comparing the output to the cell's text.
constexpr std::string_view kOtherPromptfooTypes[] = {
    "similar", "rouge-n", "bleu", "gleu", "meteor", "classifier", "cost", "webhook", "javascript", "python",
    "is-xml", "contains-xml", "is-sql", "contains-sql", "is-html", "contains-html", "factuality",
    "model-graded-factuality", "model-graded-closedqa", "answer-relevance", "context-faithfulness", "context-recall",
    "context-relevance", "moderation", "perplexity-score", "is-valid-openai-function-call",
    "is-valid-openai-tools-call", "is-refusal", "g-eval", "select-best", "max-score", "word-count"};

std::string trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

std::optional<double> number(const Json& v) {
  if (v.is_number()) return v.get<double>();
  if (!v.is_string()) return std::nullopt;
  const std::string t = trim(v.get<std::string>());
  char* end = nullptr;
  const double d = std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size()) return std::nullopt;
  return d;
}

struct Form {
  bool negate = false;
  std::string type;
  std::optional<double> threshold;
  std::optional<std::string> value;
};

// "[not-]TYPE[(DIGITS[.DIGITS])][:VALUE]" with TYPE [a-z][a-z0-9-]*; nullopt for other text.
std::optional<Form> written_form(std::string_view e) {
  Form f;
  if (e.starts_with("not-")) f.negate = true, e.remove_prefix(4);
  size_t i = 0;
  while (i < e.size() && ((e[i] >= 'a' && e[i] <= 'z') || (i > 0 && ((e[i] >= '0' && e[i] <= '9') || e[i] == '-')))) ++i;
  if (i == 0) return std::nullopt;
  f.type = std::string(e.substr(0, i));
  if (i < e.size() && e[i] == '(') {
    const size_t close = e.find(')', i);
    if (close == std::string_view::npos) return std::nullopt;
    const std::string_view number = e.substr(i + 1, close - i - 1);
    const size_t point = number.find('.');
    auto digits = [](std::string_view d) { return !d.empty() && d.find_first_not_of("0123456789") == std::string_view::npos; };
    if (!(point == std::string_view::npos ? digits(number) : digits(number.substr(0, point)) && digits(number.substr(point + 1)))) {
      return std::nullopt;
    }
    f.threshold = std::strtod(std::string(number).c_str(), nullptr);
    i = close + 1;
  }
  if (i < e.size()) {
    if (e[i] != ':') return std::nullopt;
    f.value = std::string(e.substr(i + 1));
  }
  return f;
}

}  // namespace

Json assertion_from_string(std::string_view text, bool (*known)(std::string_view type)) {
  const std::string e = trim(text);
  for (std::string_view prefix : {"grade:", "llm-rubric:"}) {
    if (e.starts_with(prefix)) return {{"type", "llm-rubric"}, {"value", e.substr(prefix.size())}};
  }
  for (auto [prefix, type] : {std::pair{"javascript:", "javascript"}, {"fn:", "javascript"}, {"eval:", "javascript"},
                              {"python:", "python"}}) {
    if (e.starts_with(prefix)) return {{"type", type}, {"value", trim(std::string_view(e).substr(std::string_view(prefix).size()))}};
  }
  // [not-]TYPE[(THRESHOLD)][:VALUE], read by hand: std::regex recurses per character, and a
  // cell can be long.
  std::optional<Form> form = written_form(e);
  if (form) {
    const std::string& type = form->type;
    const bool named = (known && known(type)) ||
                       std::find(std::begin(kOtherPromptfooTypes), std::end(kOtherPromptfooTypes), type) !=
                           std::end(kOtherPromptfooTypes);
    if (named) {
      Json a = {{"type", (form->negate ? "not-" : "") + type}};
      if (form->threshold) a["threshold"] = *form->threshold;
      if (form->value) {
        const std::string& v = *form->value;
        if (type == "contains-any" || type == "contains-all" || type == "icontains-any" || type == "icontains-all") {
          Json items = Json::array();
          for (size_t at = 0;;) {
            const size_t comma = v.find(',', at);
            items.push_back(trim(std::string_view(v).substr(at, comma == std::string::npos ? std::string::npos : comma - at)));
            if (comma == std::string::npos) break;
            at = comma + 1;
          }
          a["value"] = std::move(items);
        } else if (type == "is-json" || type == "contains-json") {
          a["value"] = v;  // a schema, as written
        } else {
          a["value"] = trim(v);
        }
      }
      return a;
    }
  }
  return {{"type", "equals"}, {"value", e}};
}

ReservedColumns take_reserved_columns(Json& vars, bool (*known)(std::string_view type)) {
  ReservedColumns out;
  if (!vars.is_object()) return out;
  std::map<std::string, double> thresholds;  // by __expected column
  std::vector<std::pair<std::string, size_t>> columns;  // __expected column -> index in out.asserts
  std::string metric;
  std::vector<std::string> taken;
  for (auto it = vars.begin(); it != vars.end(); ++it) {
    const std::string& key = it.key();
    if (!key.starts_with("__")) continue;
    taken.push_back(key);
    const Json& v = it.value();
    const std::string cell = v.is_string() ? v.get<std::string>() : v.is_null() ? "" : v.dump();
    if (key.starts_with("__expected") && key.find_first_not_of("0123456789", 10) == std::string::npos) {
      if (trim(cell).empty()) continue;
      columns.emplace_back(key, out.asserts.size());
      out.asserts.push_back(assertion_from_string(cell, known));
    } else if (key == "__description") {
      out.description = cell;
    } else if (key == "__metric") {
      metric = cell;
    } else if (key == "__threshold") {
      if (trim(cell).empty()) continue;
      if (auto n = number(v)) out.threshold = *n;
      else out.errors.push_back(fmt::format("__threshold '{}' is not a number", cell));
    } else if (key.starts_with("__metadata:")) {
      continue;  // labels for people
    } else if (key.starts_with("__config:")) {
      if (trim(cell).empty()) continue;
      const std::string rest = key.substr(9);
      const size_t colon = rest.find(':');
      const std::string column = rest.substr(0, colon);
      if (colon == std::string::npos || rest.substr(colon + 1) != "threshold" || !column.starts_with("__expected")) {
        out.errors.push_back(fmt::format("column '{}' is not __config:__expected[N]:threshold", key));
      } else if (auto n = number(v)) {
        thresholds[column] = *n;
      } else {
        out.errors.push_back(fmt::format("{} '{}' is not a number", key, cell));
      }
    } else if (!cell.empty()) {  // an empty __prefix changes nothing
      out.not_supported.push_back(fmt::format("CSV column '{}' is not supported", key));
    }
  }
  for (const std::string& key : taken) vars.erase(key);
  for (auto& [column, index] : columns) {
    if (!metric.empty()) out.asserts[index]["metric"] = metric;
    if (auto t = thresholds.find(column); t != thresholds.end()) out.asserts[index]["threshold"] = t->second;
  }
  return out;
}

std::optional<std::vector<Json>> expand_list_vars(const Json& vars, size_t most) {
  std::vector<Json> out = {Json::object()};
  if (!vars.is_object()) return out;
  for (auto it = vars.begin(); it != vars.end(); ++it) {
    // Only a list of strings is expanded (promptfoo's rule): a list of messages or numbers is
    // one value.
    if (!it.value().is_array() || it.value().empty() || !it.value()[0].is_string()) {
      for (Json& v : out) v[it.key()] = it.value();
      continue;
    }
    if (out.size() * it.value().size() > most) return std::nullopt;
    std::vector<Json> next;
    next.reserve(out.size() * it.value().size());
    for (const Json& partial : out) {
      for (const Json& value : it.value()) {
        Json v = partial;
        v[it.key()] = value;
        next.push_back(std::move(v));
      }
    }
    out = std::move(next);
  }
  return out;
}

std::vector<std::string> split_prompts(std::string_view text) {
  std::vector<std::string> out;
  std::string current;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, end - pos);
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line == "---") {
      out.push_back(std::move(current));
      current.clear();
    } else {
      current.append(text.substr(pos, std::min(end + 1, text.size()) - pos));
    }
    pos = end + 1;
  }
  out.push_back(std::move(current));
  if (out.size() == 1) return out;  // no separator: the text as it is
  // Several: each trimmed, and the empty ones (a leading or trailing ---) dropped, as promptfoo does.
  std::vector<std::string> kept;
  for (const std::string& p : out) {
    const size_t b = p.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) continue;
    kept.push_back(p.substr(b, p.find_last_not_of(" \t\r\n") - b + 1));
  }
  if (kept.empty()) kept.emplace_back();
  return kept;
}

}  // namespace sluice::eval
