#include "common/json.h"

#include <unordered_map>
#include <vector>

#include <fmt/format.h>

namespace sluice {
namespace {

using Json = nlohmann::ordered_json;
// ordered_json's object is a vector of pairs; appending to it directly skips its linear find.
using Entries = std::vector<std::pair<const std::string, Json>>;

// Builds the value on an explicit stack; nlohmann's SAX parser itself does not recurse.
class Builder : public nlohmann::json_sax<Json> {
 public:
  explicit Builder(JsonLimits limits) : limits_(limits) {}

  bool null() override { return put(Json(nullptr)); }
  bool boolean(bool v) override { return put(Json(v)); }
  bool number_integer(number_integer_t v) override { return put(Json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return put(Json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return put(Json(v)); }
  bool string(string_t& v) override { return put(Json(std::move(v))); }
  bool binary(binary_t&) override { return fail("binary values are not JSON"); }

  bool start_object(std::size_t) override { return open(Json::object()); }
  bool key(string_t& k) override {
    Frame& f = stack_.back();
    auto [it, inserted] = f.index.try_emplace(k, f.value.size());
    auto& entries = static_cast<Entries&>(f.value.get_ref<Json::object_t&>());
    if (inserted) {
      entries.emplace_back(std::move(k), Json());
      f.slot = entries.size() - 1;
    } else {
      if (limits_.reject_duplicate_keys) {
        fail(fmt::format("key '{}' appears twice in one object", it->first.substr(0, 100)));
        error_.duplicate_key = true;
        return false;
      }
      f.slot = it->second;  // a duplicate: its value is replaced where it first appeared
    }
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(Json::array()); }
  bool end_array() override { return close(); }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    // what() is "[json.exception.KIND.ID] message"; keep the message.
    std::string what = e.what();
    const size_t bracket = what.find("] ");
    error_ = {.byte = position, .message = bracket == std::string::npos ? what : what.substr(bracket + 2)};
    return false;
  }

  Json take() { return std::move(root_); }
  const JsonError& error() const { return error_; }

 private:
  struct Frame {
    Json value;
    std::unordered_map<std::string, size_t> index;  // objects: key -> position
    size_t slot = 0;                                // objects: where the next value goes
  };

  bool put(Json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return true;
    }
    Frame& f = stack_.back();
    if (f.value.is_array()) {
      f.value.get_ref<Json::array_t&>().push_back(std::move(v));
    } else {
      auto& entries = static_cast<Entries&>(f.value.get_ref<Json::object_t&>());
      entries[f.slot].second = std::move(v);
    }
    return true;
  }
  bool open(Json container) {
    if (static_cast<int>(stack_.size()) >= limits_.max_depth) {
      return fail(fmt::format("the JSON nests deeper than {} levels", limits_.max_depth));
    }
    stack_.push_back({.value = std::move(container)});
    return true;
  }
  bool close() {
    Json v = std::move(stack_.back().value);
    stack_.pop_back();
    return put(std::move(v));
  }
  bool fail(std::string message) {
    error_ = {.byte = 0, .message = std::move(message)};
    return false;
  }

  JsonLimits limits_;
  std::vector<Frame> stack_;
  Json root_;
  JsonError error_;
};

}  // namespace

std::expected<nlohmann::ordered_json, JsonError> parse_json(std::string_view text, JsonLimits limits) {
  Builder builder(limits);
  bool ok = false;
  try {
    ok = Json::sax_parse(text, &builder, nlohmann::detail::input_format_t::json, /*strict=*/true);
  } catch (const std::exception& e) {
    // The SAX parser reports through parse_error(); anything thrown is allocation failure.
    return std::unexpected(JsonError{.byte = 0, .message = e.what()});
  }
  if (!ok) return std::unexpected(builder.error());
  return builder.take();
}

}  // namespace sluice
