// sluice model info | make | quantize: inspect a GGUF file; make a random-weight model; quantize one.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "common/utf8.h"
#include "model/config.h"
#include "model/loader.h"
#include "model/model.h"
#include "model/model_maker.h"
#include "model/quantize_model.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace sluice::cli {
namespace {

std::string human_bytes(uint64_t b) {
  if (b >= (uint64_t{1} << 30)) return fmt::format("{:.2f} GiB", b / double(uint64_t{1} << 30));
  if (b >= (uint64_t{1} << 20)) return fmt::format("{:.2f} MiB", b / double(uint64_t{1} << 20));
  if (b >= 1024) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{} B", b);
}

std::string human_count(uint64_t n) {
  if (n >= 1000000000) return fmt::format("{:.2f}B", n / 1e9);
  if (n >= 1000000) return fmt::format("{:.2f}M", n / 1e6);
  if (n >= 1000) return fmt::format("{:.1f}K", n / 1e3);
  return fmt::format("{}", n);
}

int run_info(const std::string& path, bool all_metadata) {
  auto file = open_gguf(path);
  if (!file) return fail(file.error().message());
  const gguf::File& f = **file;
  std::printf("file:            %s (GGUF v%u, %s)\n", f.path().c_str(), f.version(), human_bytes(f.file_size()).c_str());
  if (f.get_bool_or("sluice.demo", false).value_or(false)) {
    std::printf("note:            built-in demo model with RANDOM weights: it talks gibberish\n");
  }
  std::string name = f.get_string_or("general.name", "");
  if (!name.empty()) std::printf("name:            %s\n", terminal_safe(name).c_str());
  if (f.find("general.architecture")) {
    auto config = ModelConfig::from_gguf(f);
    if (!config) {
      std::printf("architecture:    %s (cannot load: %s)\n",
                  terminal_safe(f.get_string_or("general.architecture", "?")).c_str(),
                  terminal_safe(config.error().message()).c_str());
    } else {
      // Binding the weights checks every tensor's presence, shape and type, as loading does.
      auto weights = ModelWeights::bind(f, *config);
      if (!weights) std::printf("loadable:        no: %s\n", terminal_safe(weights.error().message()).c_str());
      const ModelConfig& c = *config;
      std::printf("architecture:    %s\n", terminal_safe(c.arch_name).c_str());
      std::printf("layers:          %d\n", c.num_layers);
      std::printf("hidden size:     %d (ffn %d)\n", c.dim, c.ffn_dim);
      std::printf("heads:           %d (kv heads %d, head dim %d)\n", c.num_heads, c.num_kv_heads, c.head_dim);
      std::printf("vocab size:      %d\n", c.vocab_size);
      std::printf("context length:  %d\n", c.context_length);
      std::printf("rope:            theta %g, %d dims, %s order%s%s\n", c.rope_theta, c.rope_dim,
                  c.rope_neox ? "neox" : "normal", c.has_rope_freq_factors ? ", llama3 frequency factors" : "",
                  c.rope_linear_scale != 1 ? fmt::format(", linear scale {}", c.rope_linear_scale).c_str() : "");
      std::printf("rms eps:         %g\n", c.rms_eps);
      std::printf("embeddings:      %s\n", c.tied_embeddings ? "tied (output = token_embd)" : "separate output");
    }
  } else {
    std::printf("architecture:    none (vocabulary-only file)\n");
  }
  uint64_t params = 0;
  std::map<std::string, std::pair<std::pair<int, uint64_t>, uint64_t>> by_type;  // (tensors, bytes), elements
  for (const auto& t : f.tensors()) {
    params += t.num_elements;
    auto& e = by_type[std::string(gguf::tensor_type_name(t.type))];
    e.first.first += 1;
    e.first.second += t.num_bytes;
    e.second += t.num_elements;
  }
  std::printf("parameters:      %s (%llu)\n", human_count(params).c_str(), static_cast<unsigned long long>(params));
  std::printf("tensors:         %zu\n", f.tensors().size());
  for (const auto& [type, e] : by_type) {
    std::printf("  %-6s %5d tensor%s, %s, %.2f bits per weight\n", type.c_str(), e.first.first,
                e.first.first == 1 ? "" : "s", human_bytes(e.first.second).c_str(), 8.0 * e.first.second / std::max<uint64_t>(1, e.second));
  }
  uint64_t total_bytes = 0;
  for (const auto& t : f.tensors()) total_bytes += t.num_bytes;
  std::printf("bits per weight: %.2f\n", 8.0 * total_bytes / std::max<uint64_t>(1, params));
  if (f.find("tokenizer.ggml.model")) {
    auto tok = Tokenizer::from_gguf(f);
    if (tok) {
      std::printf("tokenizer:       %s (%s, pre-tokenizer %s), %d tokens, bos %d, eos %d\n",
                  std::string((*tok)->kind()).c_str(),
                  terminal_safe(f.get_string_or("tokenizer.ggml.model", "?")).c_str(),
                  terminal_safe((*tok)->pre()).c_str(), (*tok)->vocab_size(), (*tok)->bos_id(), (*tok)->eos_id());
    } else {
      std::printf("tokenizer:       cannot load: %s\n", terminal_safe(tok.error().message()).c_str());
    }
  } else {
    std::printf("tokenizer:       none\n");
  }
  std::printf("chat template:   %s\n", f.find("tokenizer.chat_template") ? "present" : "absent");
  if (all_metadata) {
    std::printf("metadata:\n");
    for (const auto& [key, value] : f.metadata()) {
      std::printf("  %s = %s\n", terminal_safe(key).c_str(), terminal_safe(value.to_string()).c_str());
    }
    std::printf("tensor list:\n");
    for (const auto& t : f.tensors()) {
      std::printf("  %-32s %-6s %s\n", terminal_safe(t.name).c_str(),
                  std::string(gguf::tensor_type_name(t.type)).c_str(), t.shape_string().c_str());
    }
  }
  return finish_stdout();
}

struct MakeOptions {
  std::string preset = "tiny";
  std::string arch;
  std::string dtype = "f32";
  std::string output;
  std::optional<int32_t> layers, dim, ffn, heads, kv_heads, head_dim, vocab_size, ctx;
  std::optional<float> rope_theta;
  std::optional<bool> tied;
  std::optional<uint64_t> seed;
  std::string vocab_file;
};

// The weight types `model make --dtype` takes: the float types and every quantized type.
constexpr std::pair<const char*, gguf::TensorType> kDtypes[] = {
    {"f32", gguf::TensorType::kF32},     {"f16", gguf::TensorType::kF16},     {"bf16", gguf::TensorType::kBF16},
    {"q8_0", gguf::TensorType::kQ8_0},   {"q6_k", gguf::TensorType::kQ6_K},   {"q5_k", gguf::TensorType::kQ5_K},
    {"q5_1", gguf::TensorType::kQ5_1},   {"q5_0", gguf::TensorType::kQ5_0},   {"q4_k", gguf::TensorType::kQ4_K},
    {"q4_1", gguf::TensorType::kQ4_1},   {"q4_0", gguf::TensorType::kQ4_0},   {"iq4_nl", gguf::TensorType::kIQ4_NL},
    {"iq4_xs", gguf::TensorType::kIQ4_XS}, {"q3_k", gguf::TensorType::kQ3_K}, {"q2_k", gguf::TensorType::kQ2_K},
};

std::string dtype_names() {
  std::string out;
  for (const auto& [name, type] : kDtypes) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

Result<gguf::TensorType> parse_dtype(const std::string& s) {
  for (const auto& [name, type] : kDtypes) {
    if (s == name) return type;
  }
  return Error("unknown dtype '{}' (choose {})", s, dtype_names());
}

struct QuantizeOptions {
  std::string input, output, type;
  int threads = 0;
  bool no_progress = false;
};

// What quantize and make write, sluice must load: the model and its tokenizer, through the
// loader, before the file replaces anything (gguf::Writer::write_file's verify step: on
// failure the output path is left as it was); the tensor count and size where asked for.
// Messages name the file as `output` (the check reads it through /proc/self/fd/N).
gguf::Writer::Verify load_back(const char* what, const std::string& output, size_t* num_tensors = nullptr,
                               uint64_t* size = nullptr) {
  return [what, output, num_tensors, size](const std::string& written) -> Status {
    auto named = [&](std::string message) {
      for (size_t at = message.find(written); at != std::string::npos; at = message.find(written, at + output.size())) {
        message.replace(at, written.size(), output);
      }
      return message;
    };
    auto check = gguf::File::open(written);
    if (!check)
      return Status::error(named(fmt::format("wrote an unreadable file (not kept): {}", check.error().message())));
    if (num_tensors) *num_tensors = (*check)->tensors().size();
    if (size) *size = (*check)->file_size();
    if (auto tok = Tokenizer::from_gguf(**check); !tok) {
      return Status::error(
          named(fmt::format("the {} model's tokenizer does not load (not kept): {}", what, tok.error().message())));
    }
    if (auto model = Model::load(std::move(*check)); !model) {
      return Status::error(
          named(fmt::format("the {} model does not load (not kept): {}", what, model.error().message())));
    }
    return Status::ok();
  };
}

int run_quantize(const QuantizeOptions& o) {
  auto mix = find_quant_mix(o.type);
  if (!mix) return fail_usage(mix.error().message());
  if (same_file(o.input, o.output)) return fail_usage(fmt::format("the output '{}' is the input file", o.output));
  auto in = gguf::File::open(o.input);
  if (!in) return fail(in.error().message());
  ThreadPool pool(o.threads);
  const bool tty = !o.no_progress && isatty(STDERR_FILENO);
  auto progress = tty ? terminal_progress("quantizing " + o.input, /*weights=*/true) : std::function<void(uint64_t, uint64_t)>();
  uint64_t size = 0;
  auto report = quantize_model(**in, **mix, o.output, pool, progress, load_back("quantized", o.output, nullptr, &size));
  if (!report) return fail(report.error().message());
  for (const std::string& f : report->fallbacks) std::fprintf(stderr, "fallback: %s\n", f.c_str());
  std::string types;
  for (const auto& [type, e] : report->by_type) {
    types += fmt::format("{}{} x{}", types.empty() ? "" : ", ", gguf::tensor_type_name(type), e.first);
  }
  std::fprintf(stderr, "wrote %s: %s (%s), %s -> %s\n", o.output.c_str(), std::string((*mix)->name).c_str(),
               types.c_str(), human_bytes((*in)->file_size()).c_str(), human_bytes(size).c_str());
  return kExitOk;
}

int run_make(const MakeOptions& o) {
  auto spec = preset_spec(o.preset);
  if (!spec) return fail_usage(spec.error().message());
  if (!o.arch.empty()) {
    if (o.arch == "llama") spec->arch = Arch::kLlama;
    else if (o.arch == "qwen2") spec->arch = Arch::kQwen2;
    else if (o.arch == "qwen3") spec->arch = Arch::kQwen3;
    else return fail_usage(fmt::format("unknown architecture '{}' (choose llama, qwen2 or qwen3)", o.arch));
  }
  auto dtype = parse_dtype(o.dtype);
  if (!dtype) return fail_usage(dtype.error().message());
  spec->dtype = *dtype;
  if (o.layers) spec->num_layers = *o.layers;
  if (o.dim) spec->dim = *o.dim;
  if (o.ffn) spec->ffn_dim = *o.ffn;
  if (o.heads) spec->num_heads = *o.heads;
  if (o.kv_heads) spec->num_kv_heads = *o.kv_heads;
  if (o.head_dim) spec->head_dim = *o.head_dim;
  if (o.vocab_size) spec->vocab_size = *o.vocab_size;
  if (o.ctx) spec->context_length = *o.ctx;
  if (o.rope_theta) spec->rope_theta = *o.rope_theta;
  if (o.tied) spec->tied_embeddings = *o.tied;
  if (o.seed) spec->seed = *o.seed;
  spec->vocab_file = o.vocab_file;
  if (!o.vocab_file.empty()) {
    if (same_file(o.vocab_file, o.output)) return fail_usage(fmt::format("the output '{}' is the --vocab file", o.output));
    // An unreadable vocabulary file is a bad file (exit 1), not a bad command line.
    if (auto v = gguf::File::open(o.vocab_file); !v) return fail(v.error().message());
  }
  auto writer = make_model(*spec);
  if (!writer) return fail_usage(writer.error().message());  // the shape the flags asked for
  size_t num_tensors = 0;
  uint64_t size = 0;
  if (Status s = writer->write_file(o.output, load_back("made", o.output, &num_tensors, &size)); !s)
    return fail(s.message());
  std::fprintf(stderr, "wrote %s: %s %s, %zu tensors, %s\n", o.output.c_str(), std::string(arch_name(spec->arch)).c_str(),
               o.dtype.c_str(), num_tensors, human_bytes(size).c_str());
  return kExitOk;
}

}  // namespace

CommandFn add_model_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("model", "Inspect GGUF files, make random-weight models, quantize models");
  cmd->require_subcommand(1);

  auto info_path = std::make_shared<std::string>();
  auto info_all = std::make_shared<bool>(false);
  CLI::App* info = cmd->add_subcommand("info", "Architecture, shapes, tensor types, tokenizer of a GGUF file");
  info->add_option("file", *info_path, "GGUF file, or 'demo'")->required();
  info->add_flag("-a,--all", *info_all, "Also list every metadata key and tensor");

  // Past int32 CLI11 would say only "Could not convert"; each flag's own limits are checked
  // after parsing, with their own messages.
  const CLI::Validator kFitsInt32(
      [](std::string& v) -> std::string {
        int64_t x = 0;
        auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
        const bool whole = end == v.data() + v.size();
        if ((ec == std::errc::result_out_of_range && whole) ||
            (ec == std::errc() && whole &&
             (x > std::numeric_limits<int32_t>::max() || x < std::numeric_limits<int32_t>::min()))) {
          return fmt::format("must be an integer in {}..{}, got {}", std::numeric_limits<int32_t>::min(),
                             std::numeric_limits<int32_t>::max(), v);
        }
        return {};
      },
      "INT");
  auto o = std::make_shared<MakeOptions>();
  std::string presets;
  for (const auto& p : model_presets()) presets += "\n  " + p.name + ": " + p.description;
  CLI::App* make = cmd->add_subcommand("make", "Make a random-weight model with a working tokenizer");
  make->footer("Presets:" + presets);
  make->add_option("--preset", o->preset, "Shape preset (listed below); the other flags override it")->capture_default_str();
  make->add_option("--arch", o->arch, "Architecture: llama, qwen2 or qwen3 (default: the preset's)");
  // Type names in either case: llama.cpp's users write Q4_K_M.
  const CLI::Validator lower_case(
      [](std::string& s) {
        for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return std::string();
      },
      "");
  make->add_option("--dtype", o->dtype, "Weight type of every matrix (either case): " + dtype_names())
      ->capture_default_str()->transform(lower_case);
  make->add_option("--layers", o->layers, "Number of transformer blocks (1..256)")->check(kFitsInt32);
  make->add_option("--dim", o->dim, "Hidden size (8..65536; with --heads, a whole, even head size unless --head-dim)")->check(kFitsInt32);
  make->add_option("--ffn", o->ffn, "Feed-forward size (1..262144)")->check(kFitsInt32);
  make->add_option("--heads", o->heads, "Attention heads (a multiple of --kv-heads)")->check(kFitsInt32);
  make->add_option("--kv-heads", o->kv_heads, "Key/value heads (grouped-query attention)")->check(kFitsInt32);
  make->add_option("--head-dim", o->head_dim, "Head size, when not hidden / heads (as in Qwen3; even, 2..1024)")
      ->check(CLI::Range(2, 1024));
  auto* vocab_size = make->add_option("--vocab-size", o->vocab_size, "Size of the synthesized BPE vocabulary (259..4194304)")->check(kFitsInt32);
  make->add_option("--ctx", o->ctx, "Context length written to the file (2..16777216)")->check(kFitsInt32);
  make->add_option("--rope-theta", o->rope_theta, "RoPE base frequency (a finite number > 1)");
  make->add_option("--tied", o->tied, "Tie output and embedding weights (true/false)");
  make->add_option("--seed", o->seed, "Seed of the random weights and vocabulary")->check(seed_validator());
  make->add_option("--vocab", o->vocab_file, "Copy the tokenizer of this GGUF file instead of synthesizing one")
      ->excludes(vocab_size);
  make->add_option("-o,--output", o->output, "Output GGUF file")->required()->check(non_empty("FILE"));

  auto q = std::make_shared<QuantizeOptions>();
  std::string mixes;
  for (const auto& m : quant_mixes()) mixes += fmt::format("\n  {:<8} {}", m.name, m.description);
  CLI::App* quantize = cmd->add_subcommand(
      "quantize", "Quantize a GGUF model of F32/F16/BF16 weights to one of llama.cpp's type mixes");
  quantize->footer(
      "Types (each names the mix of llama.cpp's llama-quantize: which tensors get more bits):" + mixes +
      "\nRound-to-nearest types (q8_0, q4_0, q4_1, q5_0, q5_1) give llama.cpp's bytes. Matrices whose rows a "
      "type cannot hold fall back to one that can (printed). No importance matrix (llama.cpp's --imatrix).");
  quantize->add_option("input", q->input, "GGUF file of float weights")->required();
  quantize->add_option("output", q->output, "Output GGUF file (written atomically, then loaded back)")
      ->required()
      ->check(non_empty("FILE"));
  quantize->add_option("--type", q->type, "Type mix (listed below; either case)")->required()->transform(lower_case);
  quantize->add_option("-t,--threads", q->threads, "Threads (0..256); 0 = one per core")->check(CLI::Range(0, 256));
  quantize->add_flag("--no-progress", q->no_progress, "No progress line on stderr (shown only when it is a terminal)");

  return [=] {
    if (*info) return run_info(*info_path, *info_all);
    if (*quantize) return run_quantize(*q);
    return run_make(*o);
  };
}

}  // namespace sluice::cli
