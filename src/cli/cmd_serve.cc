// sluice serve: the OpenAI-compatible HTTP server on the engine (src/server).
#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/chat_template_option.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "kernels/kernel_path.h"
#include "common/thread_pool.h"
#include "engine/engine.h"
#include "model/loader.h"
#include "server/api.h"
#include "server/http_server.h"

namespace sluice::cli {
namespace {

struct ServeOptions {
  std::string model = "demo";
  std::string served_model_name;
  std::string chat_template_file;
  int threads = 0;
  server::ServerConfig http;
  EngineOptions engine;
};

// FNV-1a, 64 bits: a fingerprint, not a defence against a forger.
struct Fnv {
  uint64_t h = 0xcbf29ce484222325ull;
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  }
  void add(std::string_view s) {
    add(s.data(), s.size());
    add("\0", 1);
  }
  void add(uint64_t v) { add(&v, sizeof v); }
};

// system_fingerprint: the model (its metadata, tensor layout, and the first and last 4 KiB of
// every tensor: weights that differ anywhere in training differ there), the chat template in
// use and everything in the engine configuration, so a client that records it (sluice eval
// --if-changed) sees any change of them.
std::string system_fingerprint(const gguf::File& f, const EngineConfig& c, std::string_view chat_template) {
  Fnv h;
  h.add(SLUICE_VERSION);
  h.add(chat_template);
  h.add(f.file_size());
  for (const auto& [key, value] : f.metadata()) {
    h.add(key);
    h.add(value.to_string(16));
  }
  for (const gguf::TensorInfo& t : f.tensors()) {
    h.add(t.name);
    h.add(t.shape_string());
    h.add(static_cast<uint64_t>(t.type));
    h.add(t.offset);
    if (t.data) {
      const uint64_t n = std::min<uint64_t>(4096, t.num_bytes);
      h.add(t.data, n);
      h.add(t.data + t.num_bytes - n, n);
    }
  }
  h.add(fmt::format("{} {} {} {} {} {} {} {} {} {}", c.max_num_seqs, c.max_batch_tokens, c.max_queued_requests,
                    c.block_size, kv_type_name(c.kv_type), c.kv_cache_bytes, c.coalesce, c.prefix_caching,
                    c.kv_eviction, c.pinned_prefixes.size()));
  for (const auto& p : c.pinned_prefixes) h.add(p.data(), p.size() * sizeof(int32_t));
  return fmt::format("fp_{:012x}", h.h & 0xFFFFFFFFFFFFull);
}

// What a browser sends in Origin, lower-cased: scheme "://" host[:port], where the scheme is a letter
// then letters, digits, '+', '-' or '.', and the rest is not empty and holds no '/', '?', '#' or space.
bool is_origin(std::string_view v) {
  const size_t sep = v.find("://");
  if (sep == std::string_view::npos || sep == 0 || !std::islower(static_cast<unsigned char>(v[0]))) return false;
  for (const char c : v.substr(0, sep)) {
    if (!std::islower(static_cast<unsigned char>(c)) && !std::isdigit(static_cast<unsigned char>(c)) &&
        c != '+' && c != '-' && c != '.') {
      return false;
    }
  }
  const std::string_view rest = v.substr(sep + 3);
  return !rest.empty() && std::ranges::none_of(rest, [](unsigned char c) {
    return c == '/' || c == '?' || c == '#' || std::isspace(c);
  });
}

std::string default_model_name(const std::string& model) {
  if (model == kDemoModelName) return "demo";
  std::string stem = std::filesystem::path(model).stem().string();
  return stem.empty() ? "model" : stem;
}

int run(ServeOptions& o) {
  std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error code, not a signal
  if (o.http.api_key.empty()) {
    if (std::string why = empty_key_variable("SLUICE_API_KEY"); !why.empty()) return fail_usage(why);
  }
  auto loaded = load_model(o.model, terminal_progress("loading " + o.model));
  if (!loaded) return fail(loaded.error().message());
  const Tokenizer& tok = *loaded->tokenizer;
  Model& model = *loaded->model;
  const ModelConfig& mc = model.config();

  auto chosen = choose_chat_template(model.file(), o.chat_template_file, "/v1/chat/completions uses");
  if (!chosen) return fail(chosen.error().message());
  const std::string template_source = chosen->chat_template.source();
  const std::string template_from = chosen->from;

  auto config = o.engine.to_config(mc, tok);
  if (!config) return fail_config(config.error());
  LoadedModel draft;
  if (Status s = o.engine.attach_draft(*config, draft, o.model); !s) return fail_config(s);
  ThreadPool pool(o.threads);
  auto engine = Engine::create(model, tok, pool, *config);
  if (!engine) return fail_config(engine.error());

  server::ApiConfig api_config;
  api_config.model_name = o.served_model_name.empty() ? default_model_name(o.model) : o.served_model_name;
  api_config.system_fingerprint = system_fingerprint(model.file(), *config, template_source);
  api_config.created = static_cast<int64_t>(std::time(nullptr));
  server::OpenAiApi api(**engine, tok, std::move(chosen->chat_template), api_config);

  auto server = server::HttpServer::create(api, o.http);
  if (!server) return fail(server.error().message());
  std::cerr << "model: " << o.model << (loaded->is_demo ? " (random weights: its output is gibberish)" : "")
            << ", served as '" << api_config.model_name << "'\n"
            << describe_kv_cache(**engine, mc) << "\n"
            << describe_kernels(model) << "\n"
            << describe_spec(**engine, o.engine.draft_model) << "\n"
            << "chat template: " << template_from << "\n"
            << "compute threads: " << pool.num_threads() << ", HTTP threads: " << o.http.threads
            << (o.http.api_key.empty() ? "" : ", API key required") << "\n";
  (*server)->start();
  // An IPv6 address goes in brackets in a URL (RFC 3986): http://[::1]:8000.
  const bool ipv6 = o.http.host.find(':') != std::string::npos;
  const std::string url = fmt::format("http://{}{}{}:{}", ipv6 ? "[" : "", o.http.host, ipv6 ? "]" : "",
                                      (*server)->port());
  std::cout << "sluice serve: listening on " << url << std::endl;
  // With an API key, the example says where it goes (the key itself is not printed).
  const char* env_key = std::getenv("SLUICE_API_KEY");
  const std::string auth = o.http.api_key.empty()                           ? ""
                           : env_key && o.http.api_key == env_key ? " -H \"Authorization: Bearer $SLUICE_API_KEY\""
                                                                  : " -H 'Authorization: Bearer YOUR_API_KEY'";
  std::cerr << "try:  curl " << url << "/v1/completions -H 'Content-Type: application/json'" << auth << " \\\n"
            << "        -d '{\"prompt\": \"Once upon a time\", \"max_tokens\": 32}'\n"
            << "      curl " << url << "/metrics\n"
            << "stop with Ctrl-C (in-flight requests finish first, up to --drain-timeout)\n";
  (*server)->run_until_shutdown();
  // Requests as clients count them (one of n=4 is one, not four sequences); a CORS preflight is none.
  int64_t answered = 0, refused = 0;
  for (const auto& [key, count] : (*server)->http_metrics().responses) {
    if (key.first != "/v1/completions" && key.first != "/v1/chat/completions") continue;
    if (key.second == 200) answered += count;
    if (key.second >= 400) refused += count;
  }
  const EngineMetrics m = (*engine)->metrics();
  std::cerr << "sluice serve: stopped after " << answered << " completion requests answered, " << refused
            << " refused (" << m.num_requests_submitted << " sequences, " << m.num_generation_tokens
            << " tokens generated)\n";
  return kExitOk;
}

}  // namespace

CommandFn add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve the OpenAI HTTP API (completions, chat, streaming) and /metrics");
  cmd->add_option("-m,--model", o->model, "GGUF model file, or 'demo' for the built-in random-weight demo model")
      ->capture_default_str();
  cmd->add_option("--host", o->http.host, "Address to listen on (0.0.0.0: every interface)")->capture_default_str();
  cmd->add_option("--port", o->http.port, "Port to listen on (0: any free port, printed at start)")
      ->capture_default_str()->check(CLI::Range(0, 65535));
  cmd->add_option("--served-model-name", o->served_model_name,
                  "Model name in the API (requests must name it or leave 'model' out); default: the file's stem, "
                  "or 'demo'")
      ->check(non_empty("NAME"));
  cmd->add_option("--api-key", o->http.api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/*, /tokenize and /detokenize (default: env "
                  "SLUICE_API_KEY, else none)")
      ->envname("SLUICE_API_KEY")->check(required_key());
  cmd->add_option("--chat-template", o->chat_template_file,
                  "Jinja chat template file for /v1/chat/completions, instead of the model's own");
  cmd->add_option("-t,--threads", o->threads, "Compute threads (0..256); 0 = one per core")
      ->capture_default_str()->check(CLI::Range(0, 256));
  cmd->add_option("--http-threads", o->http.threads, "Threads serving HTTP connections (1..64)")
      ->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--max-request-bytes", o->http.max_body_bytes, "Largest request body accepted; larger gets 413")
      ->capture_default_str()->check(CLI::Range(size_t{1024}, size_t{1} << 30));
  cmd->add_option("--drain-timeout", o->http.drain_seconds,
                  "Seconds in-flight requests may run after SIGTERM/SIGINT before they are cancelled")
      ->capture_default_str()
      ->check(number_in(0.0, 3600.0));
  cmd->add_option("--idle-timeout", o->http.idle_timeout_seconds,
                  "Seconds a connection may go without a byte from the client (between requests, or while it sends "
                  "one) before it is closed")
      ->capture_default_str()
      ->check(number_in(0.1, 3600.0));
  cmd->add_option("--header-timeout", o->http.header_timeout_seconds,
                  "Seconds a request's headers may take to arrive, from their first byte (against clients that "
                  "trickle them)")
      ->capture_default_str()
      ->check(number_in(0.1, 3600.0));
  cmd->add_option("--max-stream-buffer", o->http.max_stream_buffer_bytes,
                  "Bytes of a streamed answer the server holds for a client that does not read; past it the "
                  "request is cancelled")
      ->capture_default_str()->check(CLI::Range(size_t{4096}, size_t{1} << 30));
  cmd->add_option("--write-timeout", o->http.write_timeout_seconds,
                  "Seconds a client may take nothing of an answer the server is writing (64 KiB at a time) before "
                  "its connection is closed (the answer's bytes freed)")
      ->capture_default_str()
      ->check(number_in(0.1, 3600.0));
  cmd->add_option("--allowed-origins", o->http.allowed_origins,
                  "Origins browsers may call the API from (CORS), e.g. https://app.example or '*'; repeat or "
                  "separate with commas (default: none)")
      ->delimiter(',')
      ->transform(CLI::Validator(
          [](std::string& v) -> std::string {
            // What a browser sends in Origin: scheme://host[:port], no path, no trailing slash.
            // Browsers write the scheme and host in lower case; the server compares exactly.
            std::ranges::transform(v, v.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
            if (v == "*" || v == "null" || is_origin(v)) return {};
            return fmt::format("'{}' is not an origin: a browser sends scheme://host[:port] (no path, no trailing "
                               "slash), e.g. https://app.example; or '*' for any",
                               v);
          },
          "ORIGIN"));
  o->engine.add_to(*cmd);
  return [o] { return run(*o); };
}

}  // namespace sluice::cli
