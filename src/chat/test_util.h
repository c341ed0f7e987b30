// Helpers shared by the chat tests: test data paths, file reading, one-line rendering.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"

namespace sluice::chat::testing {

// src/chat/testdata in the source tree.
std::string testdata_dir();
std::string read_file(const std::string& path);
// File names (not paths) in `dir` ending with `suffix`, sorted.
std::vector<std::string> list_files(const std::string& dir, const std::string& suffix);

// A golden case: testdata/cases/NAME.json = {"context": {...}, "now": unix_seconds}.
struct Case {
  nlohmann::ordered_json context;
  RenderOptions options;
};
Case load_case(const std::string& name);

// Renders `source` with `context` (a JSON object literal); the render, or "ERROR: message".
std::string render(const std::string& source, const std::string& context_json = "{}");

}  // namespace sluice::chat::testing
