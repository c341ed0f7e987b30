// json.dumps (Python's, byte for byte) and nlohmann::json -> Value conversion.
#include <algorithm>
#include <cmath>

#include "chat/jinja_value.h"
#include "common/utf8.h"

namespace sluice::chat {

namespace {

void append_hex_escape(std::string& out, const char* prefix, uint32_t cp, int width) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += prefix;
  for (int shift = (width - 1) * 4; shift >= 0; shift -= 4) out.push_back(kHex[(cp >> shift) & 0xF]);
}

void append_json_string(std::string_view s, bool ensure_ascii, std::string& out) {
  out.push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20 || (c == 0x7F && ensure_ascii)) {  // Python's json escapes DEL only when ASCII-only
            append_hex_escape(out, "\\u", c, 4);
          } else {
            out.push_back(c);
          }
      }
      ++i;
      continue;
    }
    const Utf8Char ch = utf8_decode(s.substr(i));
    if (!ensure_ascii) {
      out.append(s.substr(i, ch.length));
    } else if (ch.code_point >= 0x10000) {
      const uint32_t v = ch.code_point - 0x10000;
      append_hex_escape(out, "\\u", 0xD800 + (v >> 10), 4);
      append_hex_escape(out, "\\u", 0xDC00 + (v & 0x3FF), 4);
    } else {
      append_hex_escape(out, "\\u", ch.code_point, 4);
    }
    i += ch.length;
  }
  out.push_back('"');
}

Status dump_json(const Value& v, const JsonDumpOptions& o, int depth, int max_depth, std::string& out) {
  if (depth > max_depth) return Status::error("tojson: value nested too deeply");
  if (out.size() > o.max_bytes) return Status::error("tojson: output too large");
  auto newline = [&](int level) {
    if (o.indent < 0) return;
    out.push_back('\n');
    out.append(static_cast<size_t>(o.indent) * level, ' ');
  };
  switch (v.kind()) {
    case ValueKind::kNone: out += "null"; return Status::ok();
    case ValueKind::kBool: out += v.as_bool() ? "true" : "false"; return Status::ok();
    case ValueKind::kInt: out += std::to_string(v.as_int()); return Status::ok();
    case ValueKind::kFloat: {
      const double d = v.as_float();
      if (std::isnan(d)) {
        out += "NaN";
      } else if (std::isinf(d)) {
        out += d < 0 ? "-Infinity" : "Infinity";
      } else {
        out += float_repr(d);
      }
      return Status::ok();
    }
    case ValueKind::kString: append_json_string(v.as_string(), o.ensure_ascii, out); return Status::ok();
    case ValueKind::kList: {
      const auto& items = v.as_list().items;
      if (items.empty()) {
        out += "[]";
        return Status::ok();
      }
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += o.item_separator;
        newline(depth + 1);
        SLUICE_CHAT_RETURN_IF_ERROR(dump_json(items[i], o, depth + 1, max_depth, out));
      }
      newline(depth);
      out.push_back(']');
      return Status::ok();
    }
    case ValueKind::kDict: {
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : v.as_dict().entries) entries.push_back(&e);
      if (entries.empty()) {
        out += "{}";
        return Status::ok();
      }
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->first < b->first; });
      }
      out.push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out += o.item_separator;
        newline(depth + 1);
        append_json_string(entries[i]->first, o.ensure_ascii, out);
        out += o.key_separator;
        SLUICE_CHAT_RETURN_IF_ERROR(dump_json(entries[i]->second, o, depth + 1, max_depth, out));
      }
      newline(depth);
      out.push_back('}');
      return Status::ok();
    }
    default:
      return Status::error(fmt::format("Object of type {} is not JSON serializable", v.type_name()));
  }
}

Status dump_json_checked(const Value& v, const JsonDumpOptions& o, int max_depth, std::string& out) {
  SLUICE_CHAT_RETURN_IF_ERROR(dump_json(v, o, 0, max_depth, out));
  if (out.size() > o.max_bytes) return Status::error("tojson: output too large");
  return Status::ok();
}

template <typename Json>
Result<Value> convert_json(const Json& j, int depth) {
  if (depth < 0) return Error("JSON input nested too deeply");
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::floating(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Value::floating(j.template get<double>());
    case nlohmann::json::value_t::string: return Value::string(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) {
        SLUICE_ASSIGN_OR_RETURN(Value item, convert_json(e, depth - 1));
        items.push_back(std::move(item));
      }
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      std::vector<std::pair<std::string, Value>> entries;
      entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        SLUICE_ASSIGN_OR_RETURN(Value item, convert_json(it.value(), depth - 1));
        entries.emplace_back(it.key(), std::move(item));
      }
      return Value::dict(std::move(entries), /*keys_unique=*/true);
    }
    default: return Value::none();  // binary and discarded values have no Python counterpart
  }
}

}  // namespace

Result<std::string> to_json(const Value& v, const JsonDumpOptions& options, int max_depth) {
  std::string out;
  Status status = dump_json_checked(v, options, max_depth, out);
  if (!status.is_ok()) return std::unexpected(status);
  return out;
}

Result<Value> from_json(const nlohmann::ordered_json& j, int max_depth) { return convert_json(j, max_depth); }
Result<Value> from_json(const nlohmann::json& j, int max_depth) { return convert_json(j, max_depth); }

}  // namespace sluice::chat
