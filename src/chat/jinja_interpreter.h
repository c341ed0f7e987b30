// Jinja interpreter: walks a TemplateAst with a context and produces the rendered text.
//
// Semantics follow jinja2 as transformers configures it (see chat_template.h): Python
// values and operators, undefined prints as "" and fails when used in arithmetic or
// attribute access, `for` bodies get a fresh scope each iteration (so `set` inside a loop
// does not leak; namespaces exist for that), `if` opens no scope, macros see the
// template's top-level variables and their own arguments.
//
// Every render is bounded (RenderLimits): output bytes, the size of any string or list a
// template builds, loop iterations, evaluation steps and macro call depth. Exceeding one is
// an error Result, never a crash or a hang. Errors carry "line L, column C". A template's
// raise_exception(msg) becomes a kInvalid Status whose message is exactly msg.
//
// One Interpreter renders one template once; it is not thread-safe, the AST it reads is.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"
#include "common/status.h"

namespace sluice::chat {

struct RenderLimits {
  size_t max_output_bytes = size_t{16} << 20;   // also the cap on any one string value
  size_t max_list_items = size_t{1} << 17;      // cap on any list a template builds
  int64_t max_loop_iterations = 1'000'000;      // summed over all loops of one render
  int64_t max_steps = 20'000'000;               // expression evaluations + statements
  int64_t max_work = 2'000'000'000;             // bytes and items scanned or built, summed
  int max_call_depth = 20;                      // nested macro calls
  int max_json_depth = 256;                     // nesting of tojson and of the input context
};

struct RenderOptions {
  RenderLimits limits;
  // What strftime_now() formats (in UTC). Absent: strftime_now is undefined, so templates
  // that test `strftime_now is defined` take their fixed-date branch. Passing the clock in
  // keeps renders reproducible.
  std::optional<std::chrono::system_clock::time_point> now;
};

class Interpreter {
 public:
  Interpreter(const TemplateAst& ast, const RenderOptions& options);

  // REQUIRES: context.is_dict(). Its entries are the template's global variables.
  Result<std::string> render(const Value& context);

  // ---- for builtins (jinja_filters.cc, jinja_methods.cc) ----
  const RenderOptions& options() const { return options_; }
  // Calls a callable value (builtin or macro).
  Result<Value> call(const Value& fn, const CallArgs& args);
  // Fails when a string of `bytes` or a list of `items` would exceed the limits.
  Status check_string_size(size_t bytes) const;
  Status check_list_size(size_t items) const;
  // Counts `n` loop iterations against the limit.
  Status count_iterations(int64_t n);
  // Counts `units` of work (bytes or items an operation scans or builds) against max_work.
  Status charge_work(size_t units);
  // A namespace owned by this render (emptied when it ends, which breaks reference cycles).
  NamespacePtr new_namespace();

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using Frame = std::vector<std::pair<std::string, Value>>;

  Result<Flow> exec_body(const Body& body);
  Result<Flow> exec(const Stmt& stmt);
  Result<Flow> exec_if(const Stmt& stmt);
  Result<Flow> exec_for(const Stmt& stmt);
  Status exec_set(const Stmt& stmt, Flow* flow);  // *flow: a break or continue met inside a block set
  Status exec_macro_definition(const Stmt& stmt);
  Status bind_targets(const std::vector<std::string>& targets, const Value& value, size_t pos);
  Result<std::string> capture(const Body& body, Flow* flow = nullptr);
  Status emit(std::string_view text);

  Result<Value> eval(const Expr& expr);
  Result<Value> eval_inner(const Expr& expr);
  Result<Value> eval_binary(const Expr& expr);
  Result<Value> eval_compare(const Expr& expr);
  Result<Value> eval_call(const Expr& expr);
  Result<Value> eval_filter(const Expr& expr);
  Result<Value> eval_test(const Expr& expr);
  Result<Value> eval_get_attr(const Expr& expr);
  Result<Value> eval_get_item(const Expr& expr);
  Result<Value> eval_slice(const Expr& expr);
  Result<CallArgs> eval_args(const Expr& expr, size_t first_child);
  // {% filter f|g %} and {% set x | f %}: the chain's innermost operand is `value`.
  Result<Value> apply_filter_chain(const Expr& chain, const Value& value);
  Result<Value> call_macro(const Stmt& macro, const CallArgs& args);

  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value value);
  Value make_loop(size_t index, const std::vector<Value>& items);
  Status positioned(const Status& status, size_t pos) const;

  const TemplateAst& ast_;
  const RenderOptions& options_;
  Value context_;
  std::vector<Frame> frames_;  // frames_[0]: template top level
  size_t frame_floor_ = 0;     // a macro sees frames_[floor..] and frames_[0]
  std::string* out_ = nullptr;
  int64_t steps_ = 0;
  int64_t iterations_ = 0;
  int64_t work_ = 0;
  int call_depth_ = 0;
  std::vector<NamespacePtr> namespaces_;
};

}  // namespace sluice::chat
