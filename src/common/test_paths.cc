#include "common/test_paths.h"

namespace sluice::testing {

std::string shared_dir() { return SLUICE_SHARED_DIR; }
std::string source_dir() { return SLUICE_SOURCE_DIR; }
std::string binary_dir() { return SLUICE_BINARY_DIR; }

}  // namespace sluice::testing
