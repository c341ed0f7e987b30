// Live conformance: renders with this library and with Python jinja2 (testdata/render.py,
// the environment transformers uses) and compares byte for byte. Covers every template x
// case of testdata/ and a list of small templates that exercise single features.
//
// Needs /usr/bin/python3 with jinja2 (Debian: python3-jinja2, installed by scripts/setup.sh);
// skipped without it.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "chat/test_util.h"

namespace sluice::chat {
namespace {

using testing::list_files;
using testing::read_file;
using testing::testdata_dir;

constexpr char kPython[] = "/usr/bin/python3";

bool python_has_jinja2() {
  // NOTE: appended, not `std::string(kPython) + "..."`, which g++ 12 at -O3 reports as a memcpy
  // out of bounds (-Warray-bounds, a known false positive of its string inlining).
  std::string cmd = kPython;
  cmd += " -c 'import jinja2' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

struct PythonRender {
  bool ok = false;
  std::string text;  // the render, or "ERROR <kind>: <message>"
};

// Renders every (template, case) pair with one Python process (render.py --batch).
std::vector<PythonRender> python_render_all(const std::vector<std::pair<std::string, std::string>>& pairs,
                                            const std::string& work_dir) {
  const std::string list_path = work_dir + "/pairs.json";
  std::ofstream(list_path) << nlohmann::json(pairs).dump();
  const std::string cmd = std::string(kPython) + " " + testdata_dir() + "/render.py --batch '" + list_path + "'";
  std::string out;
  if (FILE* pipe = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
    pclose(pipe);
  }
  std::vector<PythonRender> results;
  const auto json = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  if (!json.is_array()) return results;
  for (const auto& r : json) results.push_back({r.at(0).get<bool>(), r.at(1).get<std::string>()});
  return results;
}

// Compares our render of template_path x case_path with Python's.
void expect_conforms(const std::string& template_path, const std::string& case_path, const PythonRender& py) {
  SCOPED_TRACE(template_path + " x " + case_path);
  const auto json = nlohmann::ordered_json::parse(read_file(case_path));
  RenderOptions options;
  options.now = std::chrono::system_clock::from_time_t(json.value("now", int64_t{0}));
  auto tmpl = ChatTemplate::parse(read_file(template_path));
  Result<std::string> ours = tmpl ? tmpl->render(json.at("context"), options) : Result<std::string>(std::unexpected(tmpl.error()));
  if (!py.ok) {
    ASSERT_FALSE(ours.has_value()) << "python: " << py.text << "\nours:   " << *ours;
    constexpr std::string_view kRaise = "ERROR raise_exception: ";
    if (py.text.starts_with(kRaise)) {
      EXPECT_EQ(ours.error().message(), py.text.substr(kRaise.size()));
    }
    return;
  }
  ASSERT_TRUE(ours.has_value()) << ours.error().message() << "\npython: " << py.text;
  EXPECT_EQ(*ours, py.text);
}

void expect_all_conform(const std::vector<std::pair<std::string, std::string>>& pairs, const std::string& work_dir) {
  const std::vector<PythonRender> py = python_render_all(pairs, work_dir);
  ASSERT_EQ(py.size(), pairs.size()) << "render.py --batch failed";
  for (size_t i = 0; i < pairs.size(); ++i) expect_conforms(pairs[i].first, pairs[i].second, py[i]);
}

std::string make_work_dir() {
  const std::string dir = std::filesystem::temp_directory_path().string() + "/sluice_chat_conformance_" +
                          std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  return dir;
}

class ChatConformance : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!python_has_jinja2()) GTEST_SKIP() << kPython << " with jinja2 not found (apt-get install python3-jinja2)";
  }
};

TEST_F(ChatConformance, RealTemplatesMatchPythonJinja2) {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const std::string& t : list_files(testdata_dir() + "/templates", ".jinja")) {
    for (const std::string& c : list_files(testdata_dir() + "/cases", ".json")) {
      pairs.emplace_back(testdata_dir() + "/templates/" + t, testdata_dir() + "/cases/" + c);
    }
  }
  const std::string dir = make_work_dir();
  expect_all_conform(pairs, dir);
  std::filesystem::remove_all(dir);
}

// Small templates, one feature each, rendered against the context below.
constexpr const char* kFeatureContext = R"({"context": {
  "messages": [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Hi \"you\" <b>é</b>"},
               {"role": "assistant", "content": "Hello", "extra": {"k": [1, 2.5, null, true]}}],
  "d": {"b": 1, "a": [1, 2], "c": {"x": "y"}}, "n": 7, "f": 2.5, "s": "Hello, World", "e": "", "z": null,
  "add_generation_prompt": true}, "now": 1700000000})";

constexpr const char* kFeatureTemplates[] = {
    "{{ s|lower }}|{{ s|upper }}|{{ s|title }}|{{ 'hello wORLD-x(y'|title }}|{{ 'hELLO'|capitalize }}",
    "{{ s[::-1] }}|{{ s[1:4] }}|{{ s[-5:] }}|{{ s[:-1] }}|{{ messages[1:]|length }}|{{ 'héllo'[1:3] }}",
    "{{ n // 2 }} {{ -n // 2 }} {{ n % 3 }} {{ -n % 3 }} {{ n / 2 }} {{ f * 2 }} {{ 2 ** 10 }} {{ n - f }}",
    "{{ 1e20 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 0.1 + 0.2 }} {{ 1/3 }} {{ -0.0 }}",
    "{{ d }}|{{ messages[2] }}|{{ [1, 'a', none, true, 2.0] }}|{{ (1,) }}|{{ ('a', 'b') }}|{{ d|items|list }}",
    "{{ d|tojson }}|{{ messages|tojson }}|{{ d|tojson(indent=2) }}|{{ s|tojson }}|{{ d|tojson(sort_keys=true) }}",
    "{{ messages[1]['content']|tojson }}|{{ {'a': 'é\\n\\t\\u0001'}|tojson }}|{{ [1.0, 1e300]|tojson }}",
    "{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}"
    "{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.cycle('a', 'b') }}{{ m.role }};{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{% for c in 'ab' %}{{ c }}.{% endfor %}",
    "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1, 2, 3] if x != 2 %}{{ x }}{{ loop.length }}{% endfor %}",
    "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 4 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% set ns = namespace(count=0, found=false) %}{% for m in messages %}{% set ns.count = ns.count + 1 %}"
    "{% if m.role == 'user' %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.count }}{{ ns.found }}",
    "{% set x = 1 %}{% for i in range(3) %}{{ x }}{% set x = x + 10 %}{{ x }}{% endfor %}{{ x }}",
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', punct='?') }}",
    "{{ missing }}|{{ missing is defined }}|{{ missing|default('dflt') }}|{{ e|default('x', true) }}|{{ z is none }}"
    "|{{ messages[5] is defined }}|{{ d.nope is undefined }}|{{ missing|length }}",
    "{{ 'a' if n > 3 else 'b' }}{{ 'c' if n < 3 }}|{{ n > 3 and f < 3 }}|{{ z or 'fallback' }}|{{ not e }}|{{ 1 < n < 10 }}",
    "{{ 'ell' in s }}{{ 'x' not in s }}{{ 'a' in d }}{{ 3 in [1, 2] }}|{{ n is number }}{{ n is integer }}{{ f is float }}"
    "{{ s is string }}{{ d is mapping }}{{ s is iterable }}{{ d is sequence }}{{ true is boolean }}{{ n is divisibleby 7 }}"
    "{{ n is odd }}{{ n is even }}{{ z is true }}{{ true is true }}{{ 'a' is equalto 'a' }}{{ 1 is eq 1.0 }}",
    "{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(', ') }}|"
    "{{ messages|rejectattr('role', 'equalto', 'user')|map(attribute='role')|list }}|{{ messages|selectattr('extra')|list|length }}",
    "{{ [3, 1, 2]|sort }}{{ ['b', 'A', 'a']|sort }}{{ [1, 2]|sort(reverse=true) }}{{ [3, 1]|max }}{{ [3, 1]|min }}"
    "{{ [1, 2]|sum }}{{ [1, 1, 2]|unique|list }}{{ [1, 2, 3]|reverse|list }}{{ [1, 2]|first }}{{ [1, 2]|last }}",
    "{{ '  x  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ s.strip('Hd') }}|{{ '  a '.lstrip() }}|{{ ' a  '.rstrip() }}|"
    "{{ s.split(', ') }}|{{ ' a  b '.split() }}|{{ 'a,b,c'.split(',', 1) }}|{{ s.startswith('He') }}{{ s.endswith(('x', 'd')) }}",
    "{{ s.replace('l', 'L') }}|{{ s|replace('o', '0', 1) }}|{{ '{} and {}'.format(1, 'b') }}|{{ '{x}!'.format(x=n) }}|"
    "{{ s.find('W') }}|{{ s.count('l') }}|{{ ', '.join(['a', 'b']) }}|{{ '%s-%d' % ('a', 3) }}",
    "{{ d.get('b') }}{{ d.get('q') }}{{ d.get('q', 5) }}|{{ d.keys()|list }}|{{ d.values()|list }}|{{ d['c']['x'] }}{{ d.c.x }}",
    "{{ n|string + '!' }}|{{ '42'|int + 1 }}|{{ '3.7'|int }}|{{ 'x'|int }}|{{ '2.5'|float }}|{{ n|float }}|{{ f|int }}"
    "|{{ s|length }}|{{ d|count }}|{{ 'héllo'|length }}|{{ -3|abs }}|{{ 2.5|round }}|{{ 3.14159|round(2) }}",
    "{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'x\\ny'|indent(first=true) }}|{{ '<a href=\"x\">&</a>'|e }}|{{ s|wordcount }}",
    "{{ strftime_now('%d %b %Y') }}|{{ raise_exception is defined }}|{{ range(2, 9, 3)|list }}|{{ dict(a=1, b='x') }}",
    "  {% if true %}\n  indented\n  {% endif %}\n  {{ 'var keeps indent' }}  \n{# comment #}\nafter\n",
    "{%- if true -%}\n  a  \n{%- endif -%}\n  b  {{- ' c ' -}}  d  {#- x -#}  e\n{%+ if true %}f{% endif +%}\ng",
    "{% raw %}{{ not evaluated }}{% endraw %}|{% filter upper %}shout {{ s }}{% endfilter %}|{% set block %}B{{ n }}{% endset %}{{ block }}",
    "{{ raise_exception('custom failure: ' ~ n) }}",
    "{{ messages[0].content.missing.deeper }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}|{{ [1, 2] + [3] }}|{{ 'ab' * 3 }}|{{ [0] * 2 }}|{{ (1, 2) + (3,) }}|{{ 'a' 'b' }}",
};

TEST_F(ChatConformance, FeatureTemplatesMatchPythonJinja2) {
  const std::string dir = make_work_dir();
  const std::string case_path = dir + "/case.json";
  std::ofstream(case_path) << kFeatureContext;
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const char* source : kFeatureTemplates) {
    const std::string path = dir + "/feature" + std::to_string(pairs.size()) + ".jinja";
    std::ofstream(path, std::ios::binary) << source;
    pairs.emplace_back(path, case_path);
  }
  expect_all_conform(pairs, dir);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice::chat
