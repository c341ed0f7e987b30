// Loading a model for a command: a GGUF path, or "demo" for the built-in demo model made in
// memory. Returns the model together with its tokenizer.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

inline constexpr const char* kDemoModelName = "demo";

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  bool is_demo = false;
};

// progress(done, total) is called while pages of a large file are read in; may be empty.
Result<LoadedModel> load_model(const std::string& path_or_demo,
                               const std::function<void(uint64_t, uint64_t)>& progress = {});

// Opens just the GGUF file ("demo" gives the demo model's file).
Result<std::unique_ptr<gguf::File>> open_gguf(const std::string& path_or_demo);

}  // namespace sluice
