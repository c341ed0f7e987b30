// Case mapping of Unicode code points as Python's str methods do it (full mappings: "ß".upper()
// is "SS"), for the chat template interpreter's upper, lower, title and capitalize. The data is
// generated from Python 3.11's Unicode 14.0 tables by scripts/gen_unicode_case.py.
#pragma once

#include <cstdint>

namespace sluice::chat {

// One code point's mapping: one to three code points.
struct CaseMapping {
  char32_t cp[3] = {0, 0, 0};
  int n = 1;
};

CaseMapping upper_case(char32_t cp);
CaseMapping lower_case(char32_t cp);  // Σ is σ here; the final-sigma rule needs the context
CaseMapping title_case(char32_t cp);
// Python's "cased": a letter with case (Lu, Ll, Lt) or Other_Lowercase/Other_Uppercase.
bool is_cased(char32_t cp);
// Unicode's Case_Ignorable (apostrophes, word-internal points, modifier letters and symbols,
// combining marks, format characters...): what the final-sigma rule passes over.
bool is_case_ignorable(char32_t cp);

}  // namespace sluice::chat
