// Reading a suite, in parts: the reader of prompts, assertions and tests (suite_reader.cc), of
// defaultTest, datasets and likelihood tasks (suite.cc, which puts a suite together), and the
// helpers both use. Internal to the eval library.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "eval/suite.h"

namespace sluice::eval::suite_detail {

// The Status-returning forms of SLUICE_RETURN_IF_ERROR and SLUICE_ASSIGN_OR_RETURN.
#define RETURN_IF_FAILED(expr)    \
  do {                            \
    Status failed_ = (expr);      \
    if (!failed_) return failed_; \
  } while (0)
#define ASSIGN_OR_FAIL(lhs, expr) ASSIGN_OR_FAIL_IMPL_(SLUICE_CONCAT_(assign_or_fail_, __LINE__), lhs, expr)
#define ASSIGN_OR_FAIL_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                         \
  if (!tmp) return tmp.error();              \
  lhs = std::move(*tmp)

// The most tests one test's list vars may expand into.
inline constexpr size_t kMaxCombinations = 10000;

// `path` as written in a suite in folder `dir`: relative paths are the suite's.
std::string resolve(const std::string& dir, const std::string& path);
Status invalid(std::string message);
// `spec[key]` when it is a string, `fallback` when absent or null; another type is the suite's
// mistake (taken as absent, it would change what is run or how it is named without a word).
Result<std::string> string_field(const Json& spec, const char* key, const std::string& where, std::string fallback = {});
// Keys of `spec` not in `known`, as "'a', 'b'".
std::string unknown_keys(const Json& spec, std::span<const std::string_view> known);
// The first number JSON cannot hold (YAML's .inf, .nan, 1e400) in `j`, as a path; nullopt if none.
std::optional<std::string> non_finite_at(const Json& j, const std::string& path);
// The first var a template in `value` names that `vars` lacks; "" if none (suite_reader.cc).
std::string undefined_var(const Json& value, const Json& vars);
// The values of the list vars that `vars` is one combination of, as written, on one line.
std::string combination_name(const Json& listed, const Json& vars);

// One suite as it is read.
struct Reader {
  std::string dir;
  Suite suite;
  // Each file read once (a defaultTest var naming one is in every test), and once in the
  // suite's content (its fingerprint).
  std::map<std::string, std::string> files;
  bool default_prompt = false;  // the suite has no prompts: "{{ text }}" stands in (datasets)

  Result<std::string> file_text(const std::string& path);
  Result<std::vector<Json>> rows(const std::string& path);  // a .jsonl, .csv, .yaml or .json file's rows
  Result<std::vector<Prompt>> prompts(const Json& spec, size_t index);
  Result<Assertion> assertion(const Json& spec, const std::string& where);
  Status assertions(const Json& list, const std::string& where, std::vector<Assertion>& out);
  Status var_file(Json& v, const std::string& where);
  Status check_vars(const TestCase& t, const std::string& where);
  Status threshold(const Json& spec, const std::string& where, TestCase& t);
  Status pass_fraction(const Json& spec, const std::string& where, TestCase& t);
  Status test(const Json& spec, const TestCase& defaults, const std::string& where);
  // suite.cc
  Status default_test(const Json& d, TestCase& defaults);
  Status tests(const Json& t, const TestCase& defaults);
  Status dataset(const Json& spec, const TestCase& defaults, size_t index);
  Status likelihood(const Json& spec, size_t index);
};

}  // namespace sluice::eval::suite_detail
