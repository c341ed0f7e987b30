#include "eval/dataset.h"

#include <algorithm>
#include <fstream>
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
    if (column.empty()) continue;  // a spreadsheet's trailing empty columns: read below
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
    for (size_t c = 0; c < header.size(); ++c) {
      if (header[c].empty()) {
        if (records[r][c].empty()) continue;  // an empty cell under a column without a name
        return Error(StatusCode::kInvalid, "{}: record {} has a value in column {}, which has no name", name, r + 1, c + 1);
      }
      row[header[c]] = records[r][c];
    }
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

}  // namespace sluice::eval
