#include "router/shadow_compare.h"

#include <algorithm>
#include <cmath>

#include "common/json.h"
#include "common/sse.h"
#include "common/utf8.h"

namespace sluice::router {
namespace {

using Json = nlohmann::ordered_json;

// Reads one choice-0 object (a whole answer's or a chunk's) into `a`; completions' token start
// offsets are collected in `offsets`, chat's token byte lengths turned into ends at once.
void read_choice(const Json& choice, ShadowAnswer& a, std::vector<int64_t>& offsets) {
  if (!choice.is_object()) return;
  auto str = [](const Json& j, const char* key) -> const Json* {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? &*it : nullptr;
  };
  if (const Json* t = str(choice, "text")) a.text += t->get<std::string>();
  for (const char* holder : {"message", "delta"}) {
    if (auto m = choice.find(holder); m != choice.end() && m->is_object()) {
      if (const Json* c = str(*m, "content")) a.text += c->get<std::string>();
    }
  }
  if (const Json* f = str(choice, "finish_reason")) a.finish_reason = f->get<std::string>();
  auto lp = choice.find("logprobs");
  if (lp == choice.end() || !lp->is_object()) return;
  if (auto content = lp->find("content"); content != lp->end() && content->is_array()) {
    for (const Json& t : *content) {
      if (!t.is_object() || !t.contains("bytes") || !t["bytes"].is_array()) continue;
      const size_t begin = a.token_ends.empty() ? 0 : a.token_ends.back();
      a.token_ends.push_back(begin + t["bytes"].size());
      a.logprobs.push_back(t.contains("logprob") && t["logprob"].is_number() ? t["logprob"].get<double>() : NAN);
    }
    return;
  }
  auto lps = lp->find("token_logprobs"), offs = lp->find("text_offset");
  if (lps == lp->end() || offs == lp->end() || !lps->is_array() || !offs->is_array() || lps->size() != offs->size()) return;
  for (size_t i = 0; i < offs->size(); ++i) {
    offsets.push_back((*offs)[i].is_number_integer() ? (*offs)[i].get<int64_t>() : -1);
    a.logprobs.push_back((*lps)[i].is_number() ? (*lps)[i].get<double>() : NAN);
  }
}

void read_usage_tokens(const Json& j, ShadowAnswer& a) {
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    if (auto c = u->find("completion_tokens"); c != u->end() && c->is_number_integer()) {
      a.completion_tokens = c->get<int64_t>();
    }
  }
}

void read_object(const Json& j, ShadowAnswer& a, std::vector<int64_t>& offsets) {
  if (!j.is_object()) return;
  read_usage_tokens(j, a);
  if (j.contains("error") && a.finish_reason.empty()) a.finish_reason = "error";
  auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array()) return;
  for (const Json& c : *choices) {
    const bool first = !c.contains("index") || (c["index"].is_number_integer() && c["index"].get<int64_t>() == 0);
    if (first) read_choice(c, a, offsets);
  }
}

// Code points of `s`, at most `max`.
std::u32string code_points(std::string_view s, size_t max) {
  std::u32string out;
  while (!s.empty() && out.size() < max) {
    const Utf8Char c = utf8_decode(s);
    out.push_back(c.code_point);
    s.remove_prefix(static_cast<size_t>(c.length));
  }
  return out;
}

size_t code_point_count(std::string_view s) { return code_points(s, SIZE_MAX).size(); }

bool is_json_document(std::string_view text) {
  auto j = parse_json(text);
  return j && (j->is_object() || j->is_array());
}

}  // namespace

ShadowAnswer read_answer(int status, std::string_view body, bool stream) {
  ShadowAnswer a;
  a.status = status;
  if (status / 100 != 2) {
    a.error = fmt::format("HTTP {}", status);
    return a;
  }
  std::vector<int64_t> offsets;
  if (!stream) {
    auto j = parse_json(body);
    if (!j || !j->is_object()) {
      a.error = "the answer is not a JSON object";
      return a;
    }
    read_object(*j, a, offsets);
  } else {
    // The stream as relayed, in any line ends the replica wrote (sse.h).
    bool done = false;
    http::SseParser sse;
    sse.feed(body, [&](const http::SseEvent& e) {
      if (e.data == "[DONE]") {
        done = true;
      } else if (auto j = parse_json(e.data)) {
        read_object(*j, a, offsets);
      }
    });
    if (!done) {
      a.error = "the stream ended before [DONE]";
      return a;
    }
  }
  // Completions' offsets are where each token starts (counted from the first): ends follow.
  if (!offsets.empty()) {
    const int64_t base = offsets.front();
    bool sane = true;
    for (size_t i = 0; i < offsets.size(); ++i) {
      const int64_t end = i + 1 < offsets.size() ? offsets[i + 1] - base : static_cast<int64_t>(a.text.size());
      const int64_t begin = offsets[i] - base;
      if (offsets[i] < 0 || end < begin || end > static_cast<int64_t>(a.text.size())) sane = false;
      a.token_ends.push_back(static_cast<size_t>(std::max<int64_t>(end, 0)));
    }
    if (!sane) a.token_ends.clear();
  }
  if (!a.token_ends.empty() && a.token_ends.back() != a.text.size()) a.token_ends.clear();  // not this text's
  if (a.token_ends.empty()) a.logprobs.clear();
  a.ok = a.finish_reason != "error";
  if (!a.ok) a.error = "the answer ended with an error";
  return a;
}

bool sampled_without_seed(const nlohmann::ordered_json& body) {
  if (!body.is_object()) return false;
  if (auto s = body.find("seed"); s != body.end() && s->is_number()) return false;
  auto t = body.find("temperature");
  if (t == body.end() || t->is_null()) return true;  // OpenAI's default is 1
  return !t->is_number() || t->get<double>() > 0;
}

size_t edit_distance(std::string_view a, std::string_view b, size_t max_chars) {
  const std::u32string x = code_points(a, max_chars), y = code_points(b, max_chars);
  std::vector<size_t> prev(y.size() + 1), cur(y.size() + 1);
  for (size_t j = 0; j <= y.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= x.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= y.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x[i - 1] == y[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[y.size()];
}

ShadowComparison compare_answers(const ShadowAnswer& primary, const ShadowAnswer& shadow, bool sampled) {
  ShadowComparison c;
  c.sampled = sampled;
  const std::string_view p = primary.text, s = shadow.text;
  const size_t common = static_cast<size_t>(std::mismatch(p.begin(), p.end(), s.begin(), s.end()).first - p.begin());
  c.finish_match = primary.finish_reason == shadow.finish_reason;
  c.exact = p == s && c.finish_match;
  if (p != s) {
    c.first_diff_byte = static_cast<int64_t>(common);
    const std::vector<size_t>& ends = !shadow.token_ends.empty() ? shadow.token_ends : primary.token_ends;
    if (!ends.empty()) {
      c.first_diff_token = std::upper_bound(ends.begin(), ends.end(), common) - ends.begin();
    }
  }
  const size_t np = code_point_count(p), ns = code_point_count(s);
  const size_t longer = std::min(std::max(np, ns), kMaxEditChars);
  c.edit_distance = longer == 0 ? 0 : static_cast<double>(edit_distance(p, s)) / static_cast<double>(longer);
  c.length_ratio = np == 0 ? (ns == 0 ? 1.0 : static_cast<double>(ns)) : static_cast<double>(ns) / static_cast<double>(np);
  c.primary_json = is_json_document(p);
  c.shadow_json = c.primary_json && is_json_document(s);
  // The tokens both sides sampled alike: each token wholly inside the common prefix, cut at
  // the same places on both sides.
  if (!primary.logprobs.empty() && !shadow.logprobs.empty()) {
    double sum = 0;
    int64_t n = 0;
    for (size_t i = 0; i < primary.token_ends.size() && i < shadow.token_ends.size(); ++i) {
      if (primary.token_ends[i] != shadow.token_ends[i] || primary.token_ends[i] > common) break;
      if (std::isnan(primary.logprobs[i]) || std::isnan(shadow.logprobs[i])) continue;
      sum += shadow.logprobs[i] - primary.logprobs[i];
      ++n;
    }
    if (n > 0) {
      c.logprob_gap = sum / static_cast<double>(n);
      c.has_logprob_gap = true;
    }
  }
  c.agrees = sampled ? c.finish_match && (!c.primary_json || c.shadow_json) && c.length_ratio >= 0.5 &&
                           c.length_ratio <= 2.0
                     : c.exact;
  return c;
}

nlohmann::ordered_json to_json(const ShadowComparison& c) {
  Json j = {{"sampled", c.sampled},
            {"exact", c.exact},
            {"agrees", c.agrees},
            {"first_diff_byte", c.first_diff_byte},
            {"first_diff_token", c.first_diff_token},
            {"edit_distance", c.edit_distance},
            {"length_ratio", c.length_ratio},
            {"finish_match", c.finish_match}};
  if (c.primary_json) j["shadow_json_valid"] = c.shadow_json;
  j["logprob_gap"] = c.has_logprob_gap ? Json(c.logprob_gap) : Json(nullptr);
  return j;
}

}  // namespace sluice::router
