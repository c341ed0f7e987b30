#include "chat/unicode_case.h"

#include <algorithm>
#include <iterator>

namespace sluice::chat {
namespace {

// Every `stride`-th code point from first to last maps to itself + delta.
struct CaseRun {
  char32_t first, last;
  int32_t delta;
  int32_t stride;
};
struct SpecialCase {
  char32_t cp;
  char32_t to[3];
};
struct Range {
  char32_t first, last;
};

#include "chat/unicode_case_data.inc"

template <size_t NR, size_t NS>
CaseMapping map(char32_t cp, const CaseRun (&runs)[NR], const SpecialCase (&special)[NS]) {
  CaseMapping m;
  m.cp[0] = cp;
  const auto s = std::lower_bound(std::begin(special), std::end(special), cp,
                                  [](const SpecialCase& e, char32_t c) { return e.cp < c; });
  if (s != std::end(special) && s->cp == cp && cp != 0) {
    m.n = s->to[2] ? 3 : 2;
    std::copy(std::begin(s->to), std::end(s->to), m.cp);
    return m;
  }
  // The last run starting at or before cp.
  const auto r = std::upper_bound(std::begin(runs), std::end(runs), cp,
                                  [](char32_t c, const CaseRun& e) { return c < e.first; });
  if (r == std::begin(runs)) return m;
  const CaseRun& run = *std::prev(r);
  if (cp <= run.last && (cp - run.first) % static_cast<char32_t>(run.stride) == 0) {
    m.cp[0] = static_cast<char32_t>(static_cast<int64_t>(cp) + run.delta);
  }
  return m;
}

}  // namespace

CaseMapping upper_case(char32_t cp) { return map(cp, kUpperRuns, kUpperSpecial); }
CaseMapping lower_case(char32_t cp) { return map(cp, kLowerRuns, kLowerSpecial); }
CaseMapping title_case(char32_t cp) { return map(cp, kTitleRuns, kTitleSpecial); }

template <size_t N>
bool in_ranges(char32_t cp, const Range (&ranges)[N]) {
  const auto r = std::upper_bound(std::begin(ranges), std::end(ranges), cp,
                                  [](char32_t c, const Range& e) { return c < e.first; });
  return r != std::begin(ranges) && cp <= std::prev(r)->last;
}

bool is_cased(char32_t cp) { return in_ranges(cp, kCased); }
bool is_case_ignorable(char32_t cp) { return in_ranges(cp, kCaseIgnorable); }

}  // namespace sluice::chat
