#include "model/loader.h"

#include "model/model_maker.h"

namespace sluice {

Result<std::unique_ptr<gguf::File>> open_gguf(const std::string& path_or_demo) {
  if (path_or_demo != kDemoModelName) return gguf::File::open(path_or_demo);
  SLUICE_ASSIGN_OR_RETURN(gguf::Writer w, make_model(demo_model_spec()));
  return gguf::File::from_buffer(w.to_bytes(), "demo model");
}

Result<LoadedModel> load_model(const std::string& path_or_demo,
                               const std::function<void(uint64_t, uint64_t)>& progress) {
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<gguf::File> file, open_gguf(path_or_demo));
  LoadedModel out;
  out.is_demo = file->get_bool_or("sluice.demo", false).value_or(false);
  auto tokenizer = Tokenizer::from_gguf(*file);
  if (!tokenizer) return Error(tokenizer.error().with_context(file->path()));
  out.tokenizer = std::move(*tokenizer);
  const std::string path = file->path();
  if (file->is_mapped() && progress) file->prefault(progress);
  auto model = Model::load(std::move(file));
  if (!model) return Error(model.error().with_context(path));
  out.model = std::move(*model);
  if (out.tokenizer->vocab_size() > out.model->config().vocab_size) {
    return Error("{}: tokenizer has {} tokens but the embedding only {}", path, out.tokenizer->vocab_size(),
                 out.model->config().vocab_size);
  }
  return out;
}

}  // namespace sluice
