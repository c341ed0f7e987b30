#include "chat/test_util.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/test_paths.h"

namespace sluice::chat::testing {

std::string testdata_dir() { return sluice::testing::source_dir() + "/src/chat/testdata"; }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> list_files(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(suffix)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

Case load_case(const std::string& name) {
  const auto json = nlohmann::ordered_json::parse(read_file(testdata_dir() + "/cases/" + name + ".json"));
  Case c;
  c.context = json.at("context");
  c.options.now = std::chrono::system_clock::from_time_t(json.value("now", int64_t{0}));
  return c;
}

std::string render(const std::string& source, const std::string& context_json) {
  auto tmpl = ChatTemplate::parse(source);
  if (!tmpl) return "ERROR: " + tmpl.error().message();
  auto out = tmpl->render(nlohmann::ordered_json::parse(context_json));
  if (!out) return "ERROR: " + out.error().message();
  return *out;
}

}  // namespace sluice::chat::testing
