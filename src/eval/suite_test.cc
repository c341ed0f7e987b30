// Reading suites: YAML scalars, datasets, sluice's suite keys and promptfoo's subset, and what
// cannot run listed rather than skipped.
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "common/utf8.h"
#include "eval/dataset.h"
#include "eval/promptfoo.h"
#include "eval/render.h"
#include "eval/suite.h"

namespace sluice::eval {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  TempDir() : path(fs::temp_directory_path() / fs::path("sluice_eval_" + std::to_string(::getpid()) + "_" + std::to_string(counter++))) {
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
    return (path / name).string();
  }
  fs::path path;
  static inline int counter = 0;
};

TEST(Yaml, PlainScalarsAreTypedAndQuotedOnesStayStrings) {
  auto j = parse_yaml("a: 1\nb: '1'\nc: true\nd: \"true\"\ne: 1.5e1\nf: ~\ng: null\nh: text\ni: [x, 2]\nj: |\n  two\n  lines\n");
  ASSERT_TRUE(j) << j.error().message();
  EXPECT_EQ((*j)["a"], 1);
  EXPECT_EQ((*j)["b"], "1");
  EXPECT_EQ((*j)["c"], true);
  EXPECT_EQ((*j)["d"], "true");
  EXPECT_EQ((*j)["e"], 15.0);
  EXPECT_TRUE((*j)["f"].is_null());
  EXPECT_TRUE((*j)["g"].is_null());
  EXPECT_EQ((*j)["h"], "text");
  EXPECT_EQ((*j)["i"], Json::array({"x", 2}));
  EXPECT_EQ((*j)["j"], "two\nlines\n");
}

// Numbers past double's or int64's range are values, never an exception (1e400 ended the run).
TEST(Yaml, NumbersOutOfRangeBecomeTheNearestValue) {
  auto j = parse_yaml("a: 1e400\nb: -1e400\nc: 1e-400\nd: 99999999999999999999999\ne: 0xffffffffffffffff\n"
                      "f: 0x1ffffffffffffffff\ng: 18446744073709551615\nh: 0o17\n");
  ASSERT_TRUE(j) << j.error().message();
  EXPECT_EQ((*j)["a"], std::numeric_limits<double>::infinity());
  EXPECT_EQ((*j)["b"], -std::numeric_limits<double>::infinity());
  EXPECT_EQ((*j)["c"], 0.0);
  EXPECT_EQ((*j)["d"], 1e23);
  EXPECT_EQ((*j)["e"].get<uint64_t>(), 18446744073709551615ull);
  EXPECT_EQ((*j)["f"], 36893488147419103231.0);
  EXPECT_EQ((*j)["g"].get<uint64_t>(), 18446744073709551615ull);
  EXPECT_EQ((*j)["h"], 15);
}

// Merge keys merge (the mapping's own keys first); a key twice in one mapping is an error.
TEST(Yaml, MergeKeysMergeAndDuplicateKeysAreRefused) {
  auto j = parse_yaml("base: &b {x: 1, y: 2}\nmore: &m {z: 3}\nt: {<<: [*b, *m], y: 9}\n");
  ASSERT_TRUE(j) << j.error().message();
  EXPECT_EQ((*j)["t"], Json({{"y", 9}, {"x", 1}, {"z", 3}}));
  auto dup = parse_yaml("vars:\n  out: a\n  out: b\n");
  ASSERT_FALSE(dup);
  EXPECT_EQ(dup.error().message(), "line 3: key 'out' appears twice in one mapping");
}

TEST(Yaml, ErrorsNameTheLine) {
  auto j = parse_yaml("a: 1\nb: [unclosed\n");
  ASSERT_FALSE(j);
  EXPECT_NE(j.error().message().find("line "), std::string::npos) << j.error().message();
}

TEST(Dataset, CsvQuotesCommasNewlinesAndCrlf) {
  auto rows = parse_csv("q,a\r\n\"x, y\",\"say \"\"hi\"\"\"\nmulti,\"one\ntwo\"\n", "t.csv");
  ASSERT_TRUE(rows) << rows.error().message();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0]["q"], "x, y");
  EXPECT_EQ((*rows)[0]["a"], "say \"hi\"");
  EXPECT_EQ((*rows)[1]["a"], "one\ntwo");
  EXPECT_FALSE(parse_csv("a,b\n1\n", "t.csv"));
  auto unclosed = parse_csv("a\n\"x\n", "t.csv");
  ASSERT_FALSE(unclosed);
  EXPECT_NE(unclosed.error().message().find("t.csv:2"), std::string::npos) << unclosed.error().message();
}

TEST(Dataset, JsonlNeedsObjectsAndNamesTheLine) {
  auto bad = parse_jsonl("{\"a\": 1}\n\n[1]\n", "d.jsonl");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("d.jsonl:3"), std::string::npos);
}

TEST(Render, VariablesFiltersAndTheTrailingNewline) {
  EXPECT_EQ(*render("Q: {{ q | upper }}\n", Json{{"q", "hi"}}), "Q: HI\n");
  EXPECT_EQ(*render("{% if x %}yes{% else %}no{% endif %}", Json{{"x", false}}), "no");
  EXPECT_EQ(*render("{{missing}}.", Json::object()), ".");
  EXPECT_FALSE(render("{{ unclosed", Json::object()));
}

TEST(Suite, SluiceSuiteWithDatasetsAndLikelihoodTasks) {
  TempDir d;
  d.write("qa.jsonl", "{\"id\": 7, \"q\": \"2+2\", \"a\": \"4\"}\n{\"q\": \"3+3\", \"a\": \"6\"}\n");
  d.write("mc.csv", "context,choices,gold\nunused,x,0\n");
  d.write("items.jsonl", "{\"context\": \"The sky is\", \"choices\": [\" blue\", \" loud\"], \"gold\": 0}\n");
  const std::string path = d.write("suite.yaml", R"(
description: arithmetic
providers:
  - id: openai:chat:m
    label: local
    config: {apiBaseUrl: "http://127.0.0.1:9/v1/", temperature: 0, seed: 5, apiKeyEnvar: MY_KEY}
datasets:
  - path: qa.jsonl
    doc_to_text: "Q: {{q}}\nA:"
    doc_to_target: "{{a}}"
    assert: [{type: starts-with, value: "{{target}}"}]
likelihood:
  - {name: sky, type: multiple-choice, path: items.jsonl}
  - name: ppl
    type: perplexity
    items: [{id: one, text: "Hello world."}]
evaluateOptions: {repeat: 3}
)");
  auto s = load_suite(path);
  ASSERT_TRUE(s) << s.error().message();
  ASSERT_EQ(s->providers.size(), 1u);
  const Provider& p = s->providers[0];
  EXPECT_EQ(p.label, "local");
  EXPECT_EQ(p.api, "chat");
  EXPECT_EQ(p.model, "m");
  EXPECT_EQ(p.base_url, "http://127.0.0.1:9/v1");
  EXPECT_EQ(p.api_key_env, "MY_KEY");
  EXPECT_EQ(p.params["temperature"], 0);
  EXPECT_EQ(p.params["seed"], 5);
  ASSERT_EQ(s->prompts.size(), 1u);
  EXPECT_EQ(s->prompts[0].text, "{{ text }}");
  ASSERT_EQ(s->tests.size(), 2u);
  EXPECT_EQ(s->tests[0].vars["text"], "Q: 2+2\nA:");
  EXPECT_EQ(s->tests[0].vars["target"], "4");
  EXPECT_EQ(s->tests[0].description, "qa.jsonl 7");
  ASSERT_EQ(s->tests[1].asserts.size(), 1u);
  EXPECT_EQ(s->tests[1].asserts[0].type, "starts-with");
  ASSERT_EQ(s->likelihood.size(), 2u);
  EXPECT_EQ(s->likelihood[0].items[0].choices.size(), 2u);
  EXPECT_EQ(s->likelihood[0].items[0].gold, 0);
  EXPECT_EQ(s->likelihood[1].items[0].text, "Hello world.");
  EXPECT_EQ(s->repeat, 3);
  EXPECT_TRUE(s->not_run.empty());
  // The fingerprint's content covers the files the suite read.
  EXPECT_NE(s->content.find("\"q\": \"3+3\""), std::string::npos);
}

TEST(Suite, PromptfooConfigSubsetRunsAndTheRestIsListed) {
  TempDir d;
  d.write("prompt.txt", "Translate to French: {{text}}\n");
  d.write("tests.csv", "text,__expected\nhello,icontains: bonjour\ncat,chat\n");
  const std::string path = d.write("promptfooconfig.yaml", R"(
description: translation
prompts:
  - file://prompt.txt
  - '[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "{{text}}"}]'
providers:
  - openai:chat:gpt-4o-mini
  - id: openai:completion:base
    config: {apiBaseUrl: http://127.0.0.1:8000/v1, max_tokens: 20}
  - anthropic:messages:claude
defaultTest:
  vars: {lang: French}
  assert:
    - type: javascript
      value: output.length > 0
    - type: not-contains
      value: "Sorry"
tests: file://tests.csv
scenarios: []
)");
  auto s = load_suite(path);
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_EQ(s->providers.size(), 2u);
  EXPECT_EQ(s->providers[1].api, "completion");
  ASSERT_EQ(s->prompts.size(), 2u);
  EXPECT_EQ(s->prompts[0].label, "prompt.txt");
  EXPECT_EQ(s->prompts[0].text, "Translate to French: {{text}}\n");
  ASSERT_TRUE(s->prompts[1].messages.is_array());
  EXPECT_EQ(s->prompts[1].messages[0]["role"], "system");
  ASSERT_EQ(s->tests.size(), 2u);
  const TestCase& t0 = s->tests[0];
  EXPECT_EQ(t0.vars["text"], "hello");
  EXPECT_EQ(t0.vars["lang"], "French");  // defaultTest vars
  EXPECT_FALSE(t0.vars.contains("__expected"));
  ASSERT_EQ(t0.asserts.size(), 2u);  // not-contains (default) + icontains (__expected); javascript listed
  EXPECT_EQ(t0.asserts[0].type, "contains");
  EXPECT_TRUE(t0.asserts[0].negate);
  EXPECT_EQ(t0.asserts[1].type, "icontains");
  EXPECT_EQ(t0.asserts[1].value, "bonjour");
  EXPECT_EQ(s->tests[1].asserts[1].type, "equals");
  EXPECT_EQ(s->tests[1].asserts[1].value, "chat");
  std::string listed;
  for (const std::string& n : s->not_run) listed += n + "\n";
  EXPECT_NE(listed.find("'javascript' is not implemented"), std::string::npos) << listed;
  EXPECT_NE(listed.find("anthropic:messages:claude"), std::string::npos) << listed;
  EXPECT_NE(listed.find("'scenarios'"), std::string::npos) << listed;
}

// promptfoo's reserved CSV columns: several __expected columns, written assertions with a
// threshold, list values and bare types, a description, a metric, thresholds; the rest listed.
TEST(Suite, PromptfooCsvColumnsBecomeAssertionsAndTestFields) {
  TempDir d;
  d.write("tests.csv",
          "q,__expected,__expected1,__expected2,__expected3,__description,__metric,__threshold,"
          "__config:__expected1:threshold,__metadata:topic,__prefix\n"
          "hi,is-json,\"contains-any: a, b ,c\",levenshtein(3):hello,,greeting,polite,0.5,2,chat,>\n"
          "yo,not-starts-with:Sorry,grade:is it kind?,similar(0.9):hey,bonjour,,,,,,\n");
  const std::string path = d.write("suite.yaml", "prompts: ['{{q}}']\nproviders: [openai:chat:m]\ntests: file://tests.csv\n");
  auto s = load_suite(path);
  ASSERT_TRUE(s) << s.error().message();
  ASSERT_EQ(s->tests.size(), 2u);
  const TestCase& t0 = s->tests[0];
  EXPECT_EQ(t0.description, "greeting");
  EXPECT_EQ(t0.vars, Json({{"q", "hi"}}));
  ASSERT_EQ(t0.asserts.size(), 3u);  // the empty __expected3 cell is skipped
  EXPECT_EQ(t0.asserts[0].type, "is-json");
  EXPECT_TRUE(t0.asserts[0].value.is_null());
  EXPECT_EQ(t0.asserts[1].type, "contains-any");
  EXPECT_EQ(t0.asserts[1].value, Json::array({"a", "b", "c"}));
  EXPECT_EQ(t0.asserts[1].threshold, 2.0);  // __config:__expected1:threshold
  EXPECT_EQ(t0.asserts[2].type, "levenshtein");
  EXPECT_EQ(t0.asserts[2].value, "hello");
  EXPECT_EQ(t0.asserts[2].threshold, 3.0);
  for (const Assertion& a : t0.asserts) EXPECT_EQ(a.metric, "polite");
  EXPECT_EQ(t0.threshold, 0.5);
  ASSERT_EQ(t0.not_run.size(), 1u);
  EXPECT_NE(t0.not_run[0].find("CSV column '__prefix' is not supported"), std::string::npos) << t0.not_run[0];
  const TestCase& t1 = s->tests[1];
  ASSERT_EQ(t1.asserts.size(), 3u);
  EXPECT_EQ(t1.asserts[0].type, "starts-with");
  EXPECT_TRUE(t1.asserts[0].negate);
  EXPECT_EQ(t1.asserts[0].value, "Sorry");
  EXPECT_EQ(t1.asserts[1].type, "llm-rubric");
  EXPECT_EQ(t1.asserts[1].value, "is it kind?");
  EXPECT_EQ(t1.asserts[2].type, "equals");  // text that names no type is the expected output
  EXPECT_EQ(t1.asserts[2].value, "bonjour");
  // similar is promptfoo's, not sluice's: listed, and the test fails, never compared as text.
  ASSERT_FALSE(t1.not_run.empty());
  EXPECT_NE(t1.not_run[0].find("'similar' is not implemented"), std::string::npos) << t1.not_run[0];
}

// Text files: a byte order mark is dropped; bytes that are not UTF-8 are named by line; a
// CSV column twice in the header is refused.
TEST(Suite, FilesAreUtf8WithoutABomAndCsvColumnsAreUnique) {
  TempDir d;
  d.write("bom.csv", "\xEF\xBB\xBFq,__expected\nhi,ok\n");
  auto rows = read_rows((d.path / "bom.csv").string());
  ASSERT_TRUE(rows) << rows.error().message();
  EXPECT_EQ((*rows)[0], Json({{"q", "hi"}, {"__expected", "ok"}}));
  const std::string bad = d.write("bad.csv", "q\nfine\nab\xFF\n");
  auto r = read_rows(bad);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message(), fmt::format("'{}' line 3, byte 3 of the line: not valid UTF-8 (0xff)", bad));
  auto trailing = parse_csv("q,a,,\n1,2,,\n", "t.csv");  // a spreadsheet's empty columns
  ASSERT_TRUE(trailing) << trailing.error().message();
  EXPECT_EQ((*trailing)[0], Json({{"q", "1"}, {"a", "2"}}));
  EXPECT_FALSE(parse_csv("q,\n1,2\n", "t.csv"));  // a value under a column with no name
  auto twice = parse_csv("q,a,q\n1,2,3\n", "t.csv");
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().message(), "t.csv: column 'q' appears twice in the header");
}

// What cannot run is listed and fails its test; the suite still loads: an assertion field or a
// type sluice lacks (promptfoo's assert-set among them).
TEST(Suite, AssertionFieldsAndTypesItLacksAreListed) {
  auto doc = parse_yaml("prompts: [x]\ntests:\n  - assert: [{type: equals, value: 1, transform: x},\n"
                        "              {type: assert-set, assert: [{type: contains, value: a}]}]\n");
  ASSERT_TRUE(doc);
  auto s = parse_suite(*doc, "");
  ASSERT_TRUE(s) << s.error().message();
  ASSERT_EQ(s->tests[0].not_run.size(), 2u);
  EXPECT_NE(s->tests[0].not_run[0].find("assertion field 'transform' is not supported"), std::string::npos);
  EXPECT_NE(s->tests[0].not_run[1].find("assertion type 'assert-set' is not implemented"), std::string::npos);
}

// Assertions written in a cell, however long (a regex engine that recursed per character once
// read them), and text that only looks like a form.
TEST(Suite, AssertionStringsOfAnyLength) {
  const std::string big(1 << 20, 'a');
  EXPECT_EQ(assertion_from_string("contains:" + big, is_known_assertion), Json({{"type", "contains"}, {"value", big}}));
  EXPECT_EQ(assertion_from_string(big + ":x", is_known_assertion), Json({{"type", "equals"}, {"value", big + ":x"}}));
  EXPECT_EQ(assertion_from_string("levenshtein(2.5):hi", is_known_assertion),
            Json({{"type", "levenshtein"}, {"threshold", 2.5}, {"value", "hi"}}));
  EXPECT_EQ(assertion_from_string("levenshtein(x):hi", is_known_assertion),
            Json({{"type", "equals"}, {"value", "levenshtein(x):hi"}}));
  EXPECT_EQ(assertion_from_string("note: it rains", is_known_assertion), Json({{"type", "equals"}, {"value", "note: it rains"}}));
  EXPECT_EQ(assertion_from_string("not-icontains:Sorry", is_known_assertion), Json({{"type", "not-icontains"}, {"value", "Sorry"}}));
}

// promptfoo's forms: list vars run every combination, file:// vars hold their file, a text file
// of prompts separated by "---" lines is several prompts, {id: file://, label} names one; what
// would change the answers unseen (a provider's transform, defaultTest options) is listed.
// A combination is named by its list vars as written: a file:// value by its file's name (not
// the text read from it), on one line, cut on a character boundary.
TEST(Suite, ListVarCombinationsAreNamedAsWritten) {
  TempDir d;
  d.write("a.txt", "the same start of a long text\nA");
  d.write("b.txt", "the same start of a long text\nB");
  const std::string path = d.write("suite.yaml", R"(
prompts: ['{{ doc }} {{ word }}']
tests:
  - vars: {doc: [file://a.txt, file://b.txt], word: ["ééééééééééééééééééééééééééééé", x]}
)");
  auto s = load_suite(path);
  ASSERT_TRUE(s) << s.error().message();
  ASSERT_EQ(s->tests.size(), 4u);
  std::set<std::string> names;
  for (const TestCase& t : s->tests) {
    names.insert(t.name());
    EXPECT_TRUE(utf8_is_valid(t.name())) << t.name();
    EXPECT_EQ(t.name().find('\n'), std::string::npos) << t.name();
  }
  EXPECT_EQ(names.size(), 4u);
  EXPECT_TRUE(names.contains(s->tests[0].description + " [doc=file://b.txt, word=x]")) << *names.begin();
  EXPECT_EQ(s->tests[0].vars["doc"].get<std::string>().substr(0, 8), "the same");  // the file was still read
}

TEST(Suite, PromptfooListVarsVarFilesAndPromptFiles) {
  TempDir d;
  d.write("prompts.txt", "Say {{word}} in {{lang}}.\n---\n  Translate {{word}} to {{lang}}:\n---\n");
  d.write("notes.md", "# Title {{word}}\n---\nbody\n");  // a Markdown rule, not a separator
  d.write("list.json", R"(["a", "b"])");
  d.write("one.txt", "Just {{word}}");
  d.write("article.txt", "A long article.\n");
  d.write("person.json", R"({"name": "Bo"})");
  const std::string path = d.write("suite.yaml", R"(
providers:
  - openai:chat:m
  - {id: 'openai:chat:t', transform: 'output.toUpperCase()'}
prompts:
  - file://prompts.txt
  - {id: file://one.txt, label: plain}
  - file://notes.md
defaultTest:
  options: {transform: 'output.trim()'}
tests:
  - vars: {word: [hello, goodbye], lang: [French, German, Italian], text: file://article.txt, who: file://person.json,
           history: [{role: user, content: hi}], nums: [1, 2], letters: file://list.json}
)");
  auto s = load_suite(path);
  ASSERT_TRUE(s) << s.error().message();
  ASSERT_EQ(s->prompts.size(), 4u);  // the trailing --- makes no empty prompt
  EXPECT_EQ(s->prompts[0].label, "prompts.txt [1]");
  EXPECT_EQ(s->prompts[0].text, "Say {{word}} in {{lang}}.");
  EXPECT_EQ(s->prompts[1].text, "Translate {{word}} to {{lang}}:");
  EXPECT_EQ(s->prompts[2].label, "plain");
  EXPECT_EQ(s->prompts[2].text, "Just {{word}}");
  EXPECT_EQ(s->prompts[3].text, "# Title {{word}}\n---\nbody\n");
  ASSERT_EQ(s->tests.size(), 6u);
  EXPECT_EQ(s->tests[0].vars["word"], "hello");
  EXPECT_EQ(s->tests[0].vars["lang"], "French");
  EXPECT_EQ(s->tests[5].vars["word"], "goodbye");
  EXPECT_EQ(s->tests[5].vars["lang"], "Italian");
  // The reports name each combination by its list vars' values.
  EXPECT_EQ(s->tests[5].name(), s->tests[5].description + " [word=goodbye, lang=Italian]");
  std::set<std::string> names;
  for (const TestCase& t : s->tests) names.insert(t.name());
  EXPECT_EQ(names.size(), 6u);
  EXPECT_EQ(s->tests[3].vars["text"], "A long article.\n");
  EXPECT_EQ(s->tests[3].vars["who"], Json({{"name", "Bo"}}));
  // Lists of anything but strings, and a file holding a list, are one value each.
  EXPECT_EQ(s->tests[3].vars["history"].size(), 1u);
  EXPECT_EQ(s->tests[3].vars["nums"], Json::array({1, 2}));
  EXPECT_EQ(s->tests[3].vars["letters"], Json::array({"a", "b"}));
  ASSERT_EQ(s->providers.size(), 1u);  // the transformed one cannot run
  std::string listed;
  for (const std::string& n : s->not_run) listed += n + "\n";
  EXPECT_NE(listed.find("provider 'openai:chat:t': 'transform' is not supported"), std::string::npos) << listed;
  EXPECT_NE(listed.find("defaultTest option 'transform' is not supported"), std::string::npos) << listed;
  EXPECT_FALSE(s->tests[0].not_run.empty());  // and so every test fails, saying why
  const std::string ten = "[a, b, c, d, e, f, g, h, i, j]";
  auto many = parse_yaml("prompts: [x]\ntests: [{vars: {a: " + ten + ", b: " + ten + ", c: " + ten + ", d: " + ten +
                         ", e: [x, y]}}]\n");
  ASSERT_TRUE(many);
  auto refused = parse_suite(*many, "");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("more than 10000 combinations"), std::string::npos);
}

TEST(Suite, BrokenSuitesAreClearErrors) {
  auto check = [](const std::string& yaml, const std::string& expected) {
    auto doc = parse_yaml(yaml);
    ASSERT_TRUE(doc) << yaml;
    auto s = parse_suite(*doc, "");
    ASSERT_FALSE(s) << yaml;
    EXPECT_NE(s.error().message().find(expected), std::string::npos) << s.error().message();
  };
  check("providers: [openai:chat:m]\n", "nothing to run");
  check("providers: [openai:chat:m]\ntests: [{vars: {a: 1}}]\n", "no prompts");
  check("prompts: [x]\ntests: [{assert: [{value: 1}]}]\n", "needs a 'type'");
  check("prompts: [x]\ntests: [{assert: [{type: equals, value: 1, weight: -1}]}]\n", "'weight' must be a number >= 0");
  check("prompts: [x]\ntests: [{assert: [{type: equals, value: 1, weight: 1e400}]}]\n",
        "'tests[0].assert[0].weight' is infinite or NaN");
  check("prompts: [x]\ntests: [{threshold: .nan, assert: [{type: equals, value: 1}]}]\n", "'tests[0].threshold' is infinite");
  check("providers: [{id: 'openai:chat:m', config: {max_tokens: .inf}}]\nprompts: [x]\ntests: [{vars: {a: 1}}]\n",
        "'providers[0].config.max_tokens' is infinite");
  check("prompts: [x]\ntests: [{assert: [{type: equals, value: 1, metricOnly: 1}]}]\n", "'metricOnly' must be true or false");
  check("likelihood: [{name: x, type: multiple-choice, items: [{context: a, choices: [b, c], gold: 2}]}]\n",
        "'gold' must be the index");
  check("prompts: [x]\ntests: [{threshold: 5, assert: [{type: equals, value: 1}]}]\n", "'threshold' must be a number in [0, 1]");
  check("prompts: [x]\ndefaultTest: {threshold: -1}\ntests: [{vars: {a: 1}}]\n", "defaultTest: 'threshold' must be");
  check("prompts: [x]\ntests: [{assert: [{type: regex, value: \"([unclosed\"}]}]\n", "test 1, assertion 1: regex /([unclosed/");
  check("prompts: [x]\ntests: [{assert: [{type: json-schema, value: '[1'}]}]\n", "schema given is not a JSON/YAML object");
  check("prompts: [x]\ntests: [{assert: [{type: is-json, value: '{{s}}'}]}]\n", "schema cannot be a template");
  // A field of the wrong type is the suite's error (it was an uncaught type error: exit 1, which
  // a CI gate reads as a regression), and so is a key a dataset or likelihood task lacks.
  check("datasets: [{path: d.jsonl, limit: '1'}]\n", "dataset 1: 'limit' must be an integer >= 1");
  check("datasets: [{path: d.jsonl, doc_to_txt: '{{q}}'}]\n", "'doc_to_txt' is not a dataset field");
  check("datasets: [{path: d.jsonl, doc_to_text: 5}]\n", "dataset 1: 'doc_to_text' must be a string, not 5");
  check("likelihood: [5]\n", "likelihood task 1: must be a mapping");
  check("likelihood: [{name: 5, type: perplexity, items: [{text: a}]}]\n", "'name' must be a string, not 5");
  check("likelihood: [{name: x, type: perplexity, itemz: [{text: a}], items: [{text: b}]}]\n",
        "'itemz' is not a likelihood task field");
  check("likelihood: [{name: x, type: perplexity, items: [{text: a}]}, {name: x, type: perplexity, items: [{text: b}]}]\n",
        "two likelihood tasks are named 'x'");
  check("description: 5\nprompts: [x]\ntests: [{}]\n", "the suite: 'description' must be a string");
  check("prompts: [x]\ntests: [{description: 5}]\n", "test 1: 'description' must be a string");
  check("prompts: [x]\ntests: [{assert: [{type: contains, value: a, metric: 5}]}]\n", "'metric' must be a string");
  check("prompts: [x]\ndefaultTest: {passFraction: 7}\ntests: [{}]\n", "defaultTest: 'passFraction' must be a number in [0, 1]");
  check("prompts: [x]\nevaluateOptions: 3\ntests: [{}]\n", "'evaluateOptions' must be a mapping");
  check("judge: {id: 'openai:chat:m', config: 5}\nprompts: [x]\ntests: [{}]\n", "'config' must be a mapping");
  // A mistake in one provider of several is the suite's too (it was listed as not run, and the
  // suite ran without that provider); one sluice cannot run (another API) is listed.
  check("providers: ['openai:chat:a', {id: 'openai:chat:b', config: {seed: 1.5}}]\nprompts: [x]\ntests: [{}]\n",
        "provider 'openai:chat:b': 'seed' must be an integer");
  check("providers: ['openai:chat:a', {id: 'openai:chat:b', label: 5}]\nprompts: [x]\ntests: [{}]\n",
        "provider 'openai:chat:b': 'label' must be a string");
  check("judge: {id: 'openai:chat:m', config: {prompt: x}}\nprompts: [x]\ntests: [{}]\n", "'prompt' is set by the run itself");
  check("judge: {id: 'openai:chat:m', config: {seed: 1.5}}\nprompts: [x]\ntests: [{}]\n", "'seed' must be an integer");
  // What grading would find only after every answer, found before any request.
  check("prompts: [x]\ntests: [{assert: [{type: contains, vaule: a}]}]\n",
        "test 1, assertion 1: assertion 'contains' needs a 'value' (its 'vaule' is not a field)");
  check("prompts: [x]\ntests: [{assert: [{type: length, value: abc}]}]\n", "assertion 'length' needs a number, got \"abc\"");
  check("prompts: [x]\ntests: [{assert: [{type: length, value: {min: 1, maks: 3}}]}]\n", "'maks' is not min or max");
  check("prompts: [x]\ntests: [{assert: [{type: latency}]}]\n", "assertion 'latency' needs a threshold");
  check("prompts: [x]\ntests: [{assert: [{type: numeric, value: [1, 2]}]}]\n", "assertion 'numeric' needs a number");
  // A var a template names that the test lacks renders as "": refused, in a prompt or an assertion.
  check("prompts: ['Q: {{ questoin }}']\ntests: [{vars: {question: a}}]\n",
        "test 1: prompt 'prompt 1' names '{{ questoin }}', which is not a var of the test (its vars: question)");
  check("prompts: [x]\ntests: [{vars: {expected: a}, assert: [{type: contains, value: '{{ expectd }}'}]}]\n",
        "assertion 'contains' names '{{ expectd }}'");
}

TEST(Suite, DatasetRowsAreMappingsWithTheirPromptsText) {
  TempDir dir;
  dir.write("rows.yaml", "- a\n");
  dir.write("q.jsonl", "{\"q\": \"x\"}\n");
  for (auto [yaml, expected] : {std::pair{"datasets: [{path: rows.yaml}]\n", "rows.yaml row 1: a row must be a mapping"},
                                {"datasets: [{path: q.jsonl}]\n", "q.jsonl row 1: has no 'text' column"},
                                {"tests: [{vars: {q: y}}]\ndatasets: [{path: q.jsonl, doc_to_text: '{{ q }}'}]\n",
                                 "test 1: prompt 'text' names '{{ text }}'"}}) {
    auto doc = parse_yaml(yaml);
    ASSERT_TRUE(doc);
    auto s = parse_suite(*doc, dir.path.string());
    ASSERT_FALSE(s) << yaml;
    EXPECT_NE(s.error().message().find(expected), std::string::npos) << s.error().message();
  }
}

// Templates may name a var on purpose where a default or a statement handles its absence; a value
// a template fills is checked when graded.
TEST(Suite, TemplatesThatHandleAMissingVarAndTemplatedLimitsAreTaken) {
  auto doc = parse_yaml("prompts: ['{{ q }}{{ hint | default(\"\") }}', '{% if hint %}{{ hint }}{% endif %}{{ q }}', "
                        "'{{ hint | d(\"\") }}{{ hint if hint is defined else q }}{{ hint or q }}{{ not done }}"
                        "{{ range(2) | join(\",\") }}{# {{ old }} #}{{ q }}']\n"
                        "tests: [{vars: {q: a, n: 3}, assert: [{type: length, value: '{{ n }}'}, {type: is-json}, "
                        "{type: latency, threshold: 5}]}]\n");
  ASSERT_TRUE(doc);
  auto s = parse_suite(*doc, "");
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_EQ(s->tests.size(), 1u);
}

// A JSON schema given as text, inline or file://, is read (it was skipped: any JSON passed).
TEST(Suite, JsonSchemasGivenAsTextAreRead) {
  TempDir d;
  d.write("schema.json", R"({"type": "object", "required": ["name"]})");
  const std::string path = d.write("suite.yaml", R"(
prompts: [x]
tests:
  - assert:
      - {type: is-json, value: "file://schema.json"}
      - {type: json-schema, value: '{"type": "string"}'}
      - {type: contains-json, value: "type: array"}
)");
  auto s = load_suite(path);
  ASSERT_TRUE(s) << s.error().message();
  const auto& a = s->tests[0].asserts;
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].value["required"][0], "name");
  EXPECT_EQ(a[1].value["type"], "string");
  EXPECT_EQ(a[2].value["type"], "array");
}

// What a test cannot run stays with the test (it fails), besides the suite's list.
TEST(Suite, ATestsChecksThatCannotRunGoWithIt) {
  auto doc = parse_yaml("prompts: [x]\ntests:\n  - {assert: [{type: contains, value: a}, {type: frobnicate, value: 1}]}\n"
                        "  - {asert: [{type: contains, value: a}]}\n  - {metadata: {owner: me}, assert: [{type: contains, value: a}]}\n"
                        "  - {assert: [{type: regex, value: \"{{pattern}}\"}], vars: {pattern: a}}\n");
  ASSERT_TRUE(doc);
  auto s = parse_suite(*doc, "");
  ASSERT_TRUE(s) << s.error().message();
  ASSERT_EQ(s->tests.size(), 4u);
  ASSERT_EQ(s->tests[0].not_run.size(), 1u);
  EXPECT_NE(s->tests[0].not_run[0].find("'frobnicate' is not implemented"), std::string::npos);
  ASSERT_EQ(s->tests[1].not_run.size(), 1u);
  EXPECT_NE(s->tests[1].not_run[0].find("test field 'asert' is not supported"), std::string::npos);
  EXPECT_TRUE(s->tests[2].not_run.empty());  // metadata changes no result
  EXPECT_TRUE(s->tests[3].not_run.empty());  // a templated pattern is compiled when rendered
  EXPECT_EQ(s->not_run.size(), 2u);
}

}  // namespace
}  // namespace sluice::eval
