// An evaluation suite: what to ask (prompts x tests, likelihood tasks), whom (providers: any
// OpenAI-compatible endpoint) and how to judge the answers (assertions).
//
// One reader serves two spellings of the same structure: sluice's suite files and promptfoo's
// promptfooconfig.yaml (https://www.promptfoo.dev/docs/configuration/reference/), of which the
// subset below runs as promptfoo runs it, so users bring their suites:
//
//   description: text
//   providers:                       # "openai:chat:MODEL", "openai:completion:MODEL", or
//     - id: openai:chat:MODEL        # {id, label, config: {apiBaseUrl, apiKeyEnvar, temperature,
//       label: base                  #  max_tokens, seed, top_p, stop, ... (request fields)}}
//       config: {apiBaseUrl: http://127.0.0.1:8000/v1, temperature: 0}
//   prompts:                         # templates over the test's vars (the project's Jinja
//     - "Answer briefly: {{question}}"  # interpreter: {{ }}, filters, conditionals); "file://p.txt";
//     - {label: chatty, messages: [{role: system, content: ...}, {role: user, content: "{{q}}"}]}
//   defaultTest: {vars: {...}, assert: [...], threshold: 0.5}   # merged into every test
//   tests:                           # a list, or "file://tests.csv|.jsonl|.yaml"
//     - description: capital
//       vars: {question: "Capital of France?"}
//       threshold: 0.8               # pass when the weighted score reaches it (default: every
//       assert:                      # assertion passes)
//         - {type: icontains, value: paris, weight: 2}
//         - {type: not-contains, value: London, metric: safety}
//   datasets:                        # sluice: rows of a JSONL or CSV file become tests, with vars
//     - path: qa.jsonl               # text = doc_to_text rendered over the row and target =
//       doc_to_text: "Q: {{q}}\nA:"  # doc_to_target (as lm-evaluation-harness's); without
//       doc_to_target: "{{a}}"       # prompts, the prompt is "{{ text }}"
//       assert: [{type: starts-with, value: "{{target}}"}]
//   likelihood:                      # sluice: scored by log-likelihood over /v1/completions
//     - name: cloze                  # (echo + logprobs + max_tokens 0), on completion providers
//       type: multiple-choice        # or perplexity (field `text`)
//       path: items.jsonl            # or items: [...]; fields context, choices (list), gold (index)
//   evaluateOptions: {repeat: 3}     # samples per test (pass@k, pass^k, pass fraction)
//   judge: {id: openai:chat:MODEL, config: {...}}   # llm-rubric's grader (promptfoo:
//                                                   # defaultTest.options.provider)
//
// What the reader finds and cannot run (another provider type, an assertion type it does not
// implement, a promptfoo key with no meaning here) is listed in Suite::not_run, each with the
// reason, and reported with every run; it is never skipped silently.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "eval/yaml_json.h"

namespace sluice::eval {

struct Provider {
  std::string label;          // the suite's label, else its id
  std::string api = "chat";   // "chat" (/chat/completions) or "completion" (/completions)
  std::string base_url;       // ends before /chat/completions, e.g. http://127.0.0.1:8000/v1
  bool base_url_default = false;  // the suite named no apiBaseUrl or apiHost (OPENAI_BASE_URL's or OpenAI's)
  std::string model;
  std::string api_key_env;    // environment variable holding the key; "" none
  std::string api_key;        // the key itself, when the caller gives one (never from a suite)
  Json params = Json::object();  // request fields: temperature, max_tokens, seed, stop, ...
};

struct Prompt {
  std::string label;          // its label or id, else "prompt N" (items are matched by it)
  std::string text;           // template: the completion prompt, or the one user message
  Json messages;              // chat messages with template contents, or null
};

struct Assertion {
  std::string type;           // without the "not-" prefix
  bool negate = false;
  Json value;                 // strings are templates over the test's vars
  double weight = 1.0;        // the share of the test's score; 0: must still pass (promptfoo's rule)
  bool metric_only = false;   // only feeds `metric`: neither the test's pass nor its score
  std::optional<double> threshold;
  std::string metric;         // a named metric this assertion's score is averaged into
  std::optional<Provider> judge;  // llm-rubric's grader, when the assertion names one
};

struct TestCase {
  std::string description;
  // The values of the list vars this test is one combination of ("topic=a, lang=fr"), so the
  // reports tell the combinations apart; empty for a test that was not expanded.
  std::string combination;
  Json vars = Json::object();
  std::vector<Assertion> asserts;
  std::optional<double> threshold;   // on the weighted mean score
  double pass_fraction = 1.0;        // with repeats: the share of samples that must pass
  // What of this test could not run (an assertion type not implemented, a field not
  // supported): the test then fails with these reasons, never passes on the checks that ran.
  std::vector<std::string> not_run;

  // The name the reports give it: the description, and the combination in brackets. (Items
  // are joined by the description and vars, so the name can change without breaking baselines.)
  std::string name() const { return combination.empty() ? description : description + " [" + combination + "]"; }
};

struct LikelihoodItem {
  std::string id;
  std::string context;                // multiple-choice: scored choices follow it
  std::vector<std::string> choices;
  int32_t gold = -1;
  std::string text;                   // perplexity
};

struct LikelihoodTask {
  std::string name;
  std::string type;                   // "multiple-choice" or "perplexity"
  std::vector<LikelihoodItem> items;
};

struct Suite {
  std::string path;                   // the file read ("" when parsed from memory)
  std::string description;
  std::vector<Provider> providers;
  std::vector<Prompt> prompts;
  std::vector<TestCase> tests;
  std::vector<LikelihoodTask> likelihood;
  std::optional<Provider> judge;
  int32_t repeat = 1;
  std::vector<std::string> not_run;   // what cannot be run, and why
  std::string content;                // the suite's bytes and every file it read, for the fingerprint
};

// Assertion types implemented (assertions.h), without "not-".
bool is_known_assertion(std::string_view type);

// Reads a suite file (YAML or JSON). Relative file:// paths and dataset paths are taken from
// the suite's folder. Errors (kInvalid) name the file and what is wrong in it.
Result<Suite> load_suite(const std::string& path);
// The same from a parsed document; `dir` resolves relative paths.
Result<Suite> parse_suite(const Json& doc, const std::string& dir);

// Parses "openai:chat:MODEL" / "openai:completion:MODEL" (or an object with id/label/config)
// into a provider; the base URL defaults to OPENAI_BASE_URL, else https://api.openai.com/v1.
Result<Provider> parse_provider(const Json& spec);

// A request field a provider's config (or `eval run --set`) may set: not one the run writes
// itself (prompt, messages, model; stream, n, echo other than false, 1, false); a seed is an integer.
Status check_request_field(const std::string& key, const Json& value);

}  // namespace sluice::eval
