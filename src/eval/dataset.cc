#include "eval/dataset.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "common/utf8.h"

namespace sluice::eval {

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error(StatusCode::kInvalid, "cannot read '{}'", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Error(StatusCode::kInvalid, "cannot read '{}'", path);
  std::string text = ss.str();
  if (text.starts_with("\xEF\xBB\xBF")) text.erase(0, 3);  // a byte order mark (Excel writes one)
  if (const size_t valid = utf8_valid_prefix_length(text); valid < text.size()) {
    const std::string_view before = std::string_view(text).substr(0, valid);
    const size_t line = 1 + static_cast<size_t>(std::count(before.begin(), before.end(), '\n'));
    const size_t newline = before.rfind('\n');
    const size_t column = valid - (newline == std::string_view::npos ? 0 : newline + 1) + 1;
    return Error(StatusCode::kInvalid, "'{}' line {}, byte {} of the line: not valid UTF-8 (0x{:02x})", path, line,
                 column, static_cast<unsigned char>(text[valid]));
  }
  return text;
}

Result<std::vector<Json>> parse_jsonl(std::string_view text, const std::string& name) {
  std::vector<Json> rows;
  size_t line = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view l = text.substr(pos, end - pos);
    pos = end + 1;
    ++line;
    if (l.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    Json row = Json::parse(l, nullptr, /*allow_exceptions=*/false);
    if (row.is_discarded()) return Error(StatusCode::kInvalid, "{}:{}: not a JSON value", name, line);
    if (!row.is_object()) return Error(StatusCode::kInvalid, "{}:{}: each line must be a JSON object", name, line);
    rows.push_back(std::move(row));
  }
  return rows;
}

Result<std::vector<Json>> parse_csv(std::string_view text, const std::string& name) {
  std::vector<std::vector<std::string>> records;
  std::vector<std::string> record;
  std::string field;
  bool quoted = false, field_started = false;
  size_t line = 1, quote_line = 0;
  auto end_field = [&] {
    record.push_back(std::move(field));
    field.clear();
    field_started = false;
  };
  auto end_record = [&] {
    end_field();
    if (!(record.size() == 1 && record[0].empty())) records.push_back(std::move(record));
    record.clear();
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          field += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        if (c == '\n') ++line;
        field += c;
      }
      continue;
    }
    if (c == '"' && !field_started) {
      quoted = true;
      field_started = true;
      quote_line = line;
    } else if (c == ',') {
      end_field();
    } else if (c == '\n') {
      end_record();
      ++line;
    } else if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') {
      // CRLF: the \n ends the record
    } else {
      field += c;
      field_started = true;
    }
  }
  if (quoted) return Error(StatusCode::kInvalid, "{}:{}: a quoted field is never closed", name, quote_line);
  if (!field.empty() || !record.empty()) end_record();
  if (records.empty()) return Error(StatusCode::kInvalid, "{}: no header row", name);
  const std::vector<std::string>& header = records[0];
  std::set<std::string_view> seen;
  for (const std::string& column : header) {
    if (!seen.insert(column).second) {
      return Error(StatusCode::kInvalid, "{}: column '{}' appears twice in the header", name, column);
    }
  }
  std::vector<Json> rows;
  for (size_t r = 1; r < records.size(); ++r) {
    if (records[r].size() != header.size()) {
      return Error(StatusCode::kInvalid, "{}: record {} has {} fields, the header {}", name, r + 1, records[r].size(),
                   header.size());
    }
    Json row = Json::object();
    for (size_t c = 0; c < header.size(); ++c) row[header[c]] = records[r][c];
    rows.push_back(std::move(row));
  }
  return rows;
}

Result<std::vector<Json>> read_rows(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(std::string text, read_file(path));
  if (path.ends_with(".jsonl") || path.ends_with(".ndjson")) return parse_jsonl(text, path);
  if (path.ends_with(".csv")) return parse_csv(text, path);
  return Error(StatusCode::kInvalid, "'{}': a dataset must be .jsonl or .csv", path);
}

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
  static const std::regex kForm(R"(^(not-)?([a-z][a-z0-9-]*?)(?:\((\d+(?:\.\d+)?)\))?(?::([\s\S]*))?$)");
  std::smatch m;
  if (std::regex_match(e, m, kForm)) {
    const std::string type = m[2].str();
    const bool named = (known && known(type)) ||
                       std::find(std::begin(kOtherPromptfooTypes), std::end(kOtherPromptfooTypes), type) !=
                           std::end(kOtherPromptfooTypes);
    if (named) {
      Json a = {{"type", m[1].str() + type}};
      if (m[3].matched) a["threshold"] = std::strtod(m[3].str().c_str(), nullptr);
      if (m[4].matched) {
        const std::string v = m[4].str();
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

}  // namespace sluice::eval
