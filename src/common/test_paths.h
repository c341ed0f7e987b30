// Where the tests find their data: the shared folder beside the checkout (models, tokenizer
// vectors), the source tree (testdata) and the build tree (the sluice binary).
//
// NOTE: the paths are compiled into test_paths.cc alone, not into every test's command line,
// so that a compiler cache shares the tests' objects between two checkouts in different folders
// (only this one file differs between them).
#pragma once

#include <string>

namespace sluice::testing {

std::string shared_dir();  // ../shared from the source tree
std::string source_dir();  // the checkout
std::string binary_dir();  // this build's folder (build/release, ...)

}  // namespace sluice::testing
