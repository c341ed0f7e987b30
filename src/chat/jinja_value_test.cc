// Python printing and json.dumps fidelity of Value.
#include "chat/jinja_value.h"

#include <cmath>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace sluice::chat {
namespace {

TEST(JinjaValue, FloatReprIsPythons) {
  EXPECT_EQ(float_repr(1.0), "1.0");
  EXPECT_EQ(float_repr(2.5), "2.5");
  EXPECT_EQ(float_repr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(float_repr(1e16), "1e+16");
  EXPECT_EQ(float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(float_repr(0.0001), "0.0001");
  EXPECT_EQ(float_repr(0.00001), "1e-05");
  EXPECT_EQ(float_repr(-1.5e-300), "-1.5e-300");
  EXPECT_EQ(float_repr(123456789.125), "123456789.125");
  EXPECT_EQ(float_repr(-0.0), "-0.0");
  EXPECT_EQ(float_repr(INFINITY), "inf");
  EXPECT_EQ(float_repr(NAN), "nan");
}

TEST(JinjaValue, StrAndReprFollowPython) {
  const Value list = Value::list({Value::string("it's"), Value::string("q\"'"), Value::string("a\nb"), Value::none(),
                                  Value::boolean(true), Value::floating(2.0), Value::integer(-3)});
  EXPECT_EQ(to_str(list), R"(["it's", 'q"\'', 'a\nb', None, True, 2.0, -3])");
  EXPECT_EQ(to_str(Value::list({Value::integer(1)}, /*is_tuple=*/true)), "(1,)");
  EXPECT_EQ(to_str(Value::dict({{"k", Value::list({})}, {"k2", Value::dict({})}})), "{'k': [], 'k2': {}}");
  EXPECT_EQ(to_str(Value::undefined("x")), "");
  EXPECT_EQ(to_str(Value::string("\x01\xC2\xA0")), "\x01\xC2\xA0");  // str() prints raw
  std::string repr;
  append_repr(Value::string("\x01\xC2\xA0\xC3\xA9"), repr);
  EXPECT_EQ(repr, "'\\x01\\xa0\xC3\xA9'");
}

TEST(JinjaValue, ToJsonMatchesJsonDumps) {
  const Value v = Value::dict({{"b", Value::list({Value::integer(1), Value::floating(2.0), Value::none()})},
                               {"a", Value::string("<&>'\"\\\n\x01\xC3\xA9\xF0\x9F\xA6\x99")}});
  JsonDumpOptions o;
  EXPECT_EQ(*to_json(v, o, 10), R"({"b": [1, 2.0, null], "a": "<&>'\"\\\n\u0001)" "\xC3\xA9\xF0\x9F\xA6\x99\"}");
  o.ensure_ascii = true;
  o.sort_keys = true;
  EXPECT_EQ(*to_json(v, o, 10), R"({"a": "<&>'\"\\\n\u0001\u00e9\ud83e\udd99", "b": [1, 2.0, null]})");
  JsonDumpOptions indented;
  indented.indent = 2;
  indented.item_separator = ",";
  EXPECT_EQ(*to_json(Value::dict({{"x", Value::list({Value::integer(1), Value::dict({})})}}), indented, 10),
            "{\n  \"x\": [\n    1,\n    {}\n  ]\n}");
  EXPECT_FALSE(to_json(Value::undefined(), o, 10).has_value());
  EXPECT_FALSE(to_json(Value::list({Value::list({Value::list({})})}), o, 1).has_value());
}

TEST(JinjaValue, EqualityAndOrderingArePythons) {
  EXPECT_TRUE(Value::integer(1).equals(Value::floating(1.0)));
  EXPECT_TRUE(Value::boolean(true).equals(Value::integer(1)));
  EXPECT_FALSE(Value::string("1").equals(Value::integer(1)));
  EXPECT_TRUE(Value::list({Value::integer(1)}).equals(Value::list({Value::floating(1.0)})));
  EXPECT_FALSE(Value::list({}).equals(Value::list({}, /*is_tuple=*/true)));
  EXPECT_EQ(*compare_values(Value::string("a"), Value::string("b")), -1);
  EXPECT_EQ(*compare_values(Value::list({Value::integer(1), Value::integer(3)}), Value::list({Value::integer(1)})), 1);
  EXPECT_FALSE(compare_values(Value::string("a"), Value::integer(1)).has_value());
}

// Large dicts are found through their index; small ones by a scan: the same answers, and a
// later duplicate key replaces the earlier one in place (a dict literal's rule) either way.
TEST(JinjaValue, DictLookupsAreTheSameIndexedOrNot) {
  for (int n : {3, 8, 9, 2000}) {
    std::vector<std::pair<std::string, Value>> entries;
    for (int i = 0; i < n; ++i) entries.emplace_back(fmt::format("k{}", i), Value::integer(i));
    entries.emplace_back("k0", Value::integer(-1));
    const Value d = Value::dict(std::move(entries));
    ASSERT_EQ(d.as_dict().entries.size(), static_cast<size_t>(n)) << n;
    EXPECT_EQ(d.as_dict().entries[0].second.as_int(), -1) << n;  // replaced where it stood
    EXPECT_EQ(d.as_dict().find("k0")->as_int(), -1) << n;
    for (int i = 1; i < n; ++i) ASSERT_EQ(d.as_dict().find(fmt::format("k{}", i))->as_int(), i) << n;
    EXPECT_EQ(d.as_dict().find(fmt::format("k{}", n)), nullptr) << n;
    EXPECT_EQ(d.as_dict().find(""), nullptr) << n;
  }
}

TEST(JinjaValue, FromJsonKeepsOrderAndRefusesDeepNesting) {
  const auto j = nlohmann::ordered_json::parse(R"({"z": 1, "a": [true, 1.5, "s", null, 18446744073709551615]})");
  auto v = from_json(j, 10);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(to_str(*v), "{'z': 1, 'a': [True, 1.5, 's', None, 1.8446744073709552e+19]}");
  EXPECT_FALSE(from_json(nlohmann::ordered_json::parse("[[[[1]]]]"), 2).has_value());
}

}  // namespace
}  // namespace sluice::chat
