// Statement execution and expression evaluation; see jinja_interpreter.h for semantics.
// Operators live in jinja_operators.cc, builtins in jinja_filters.cc / jinja_methods.cc.
#include "chat/jinja_interpreter.h"

#include "chat/jinja_builtins.h"
#include "chat/jinja_lexer.h"
#include "chat/jinja_operators.h"

namespace sluice::chat {

Interpreter::Interpreter(const TemplateAst& ast, const RenderOptions& options) : ast_(ast), options_(options) {}

Result<std::string> Interpreter::render(const Value& context) {
  context_ = context;
  frames_.assign(1, Frame{});
  frame_floor_ = 0;
  std::string out;
  out_ = &out;
  auto result = exec_body(ast_.body);
  // Break reference cycles a template may have built through namespaces (ns.x = [ns]).
  for (Frame& frame : frames_) frame.clear();
  for (const NamespacePtr& ns : namespaces_) ns->entries.clear();
  namespaces_.clear();
  if (!result) return std::unexpected(result.error());
  return out;
}

Status Interpreter::positioned(const Status& status, size_t pos) const {
  // raise_exception messages reach the user unchanged; so do already positioned errors.
  if (status.code() == StatusCode::kInvalid || status.message().starts_with("chat template")) return status;
  return Status::error(fmt::format("chat template error at {}: {}", line_column(ast_.source, pos), status.message()));
}

Status Interpreter::check_string_size(size_t bytes) const {
  if (bytes > options_.limits.max_output_bytes) {
    return Status::error(fmt::format("string longer than the limit of {} bytes", options_.limits.max_output_bytes));
  }
  return Status::ok();
}

Status Interpreter::check_list_size(size_t items) const {
  if (items > options_.limits.max_list_items) {
    return Status::error(fmt::format("list longer than the limit of {} items", options_.limits.max_list_items));
  }
  return Status::ok();
}

Status Interpreter::count_iterations(int64_t n) {
  iterations_ += n;
  if (iterations_ > options_.limits.max_loop_iterations) {
    return Status::error(fmt::format("more than {} loop iterations", options_.limits.max_loop_iterations));
  }
  return Status::ok();
}

Status Interpreter::charge_work(size_t units) {
  work_ += static_cast<int64_t>(std::min<size_t>(units, INT64_MAX / 4));
  if (work_ > options_.limits.max_work) {
    return Status::error(fmt::format("more than {} units of work", options_.limits.max_work));
  }
  return Status::ok();
}

NamespacePtr Interpreter::new_namespace() {
  auto ns = std::make_shared<NamespaceObject>();
  namespaces_.push_back(ns);
  return ns;
}

Status Interpreter::emit(std::string_view text) {
  SLUICE_CHAT_RETURN_IF_ERROR(charge_work(text.size()));
  if (out_->size() + text.size() > options_.limits.max_output_bytes) {
    return Status::error(fmt::format("output longer than the limit of {} bytes", options_.limits.max_output_bytes));
  }
  out_->append(text);
  return Status::ok();
}

// ---- scopes ----

Value Interpreter::lookup(const std::string& name) const {
  for (size_t i = frames_.size(); i-- > frame_floor_;) {
    for (const auto& [k, v] : frames_[i]) {
      if (k == name) return v;
    }
  }
  if (frame_floor_ > 0) {
    for (const auto& [k, v] : frames_[0]) {
      if (k == name) return v;
    }
  }
  if (const Value* v = context_.as_dict().find(name)) return *v;
  if (auto global = get_global(name, options_)) return *global;
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

void Interpreter::assign(const std::string& name, Value value) {
  Frame& frame = frames_.back();
  for (auto& [k, v] : frame) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  frame.emplace_back(name, std::move(value));
}

// ---- statements ----

Result<Interpreter::Flow> Interpreter::exec_body(const Body& body) {
  for (const StmtPtr& stmt : body) {
    SLUICE_ASSIGN_OR_RETURN(Flow flow, exec(*stmt));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Result<Interpreter::Flow> Interpreter::exec(const Stmt& stmt) {
  if (++steps_ > options_.limits.max_steps) {
    return Error("chat template error: more than {} evaluation steps", options_.limits.max_steps);
  }
  switch (stmt.kind) {
    case StmtKind::kText: {
      Status s = emit(stmt.text);
      if (!s.is_ok()) return std::unexpected(positioned(s, stmt.pos));
      return Flow::kNormal;
    }
    case StmtKind::kOutput: {
      SLUICE_ASSIGN_OR_RETURN(Value v, eval(*stmt.expr));
      Status s = emit(to_str(v));
      if (!s.is_ok()) return std::unexpected(positioned(s, stmt.pos));
      return Flow::kNormal;
    }
    case StmtKind::kIf: return exec_if(stmt);
    case StmtKind::kFor: return exec_for(stmt);
    case StmtKind::kSet: {
      Flow flow = Flow::kNormal;
      SLUICE_RETURN_IF_ERROR(exec_set(stmt, &flow));
      return flow;
    }
    case StmtKind::kMacro: SLUICE_RETURN_IF_ERROR(exec_macro_definition(stmt)); return Flow::kNormal;
    case StmtKind::kBreak: return Flow::kBreak;
    case StmtKind::kContinue: return Flow::kContinue;
    case StmtKind::kGeneration: return exec_body(stmt.bodies[0]);
    case StmtKind::kFilterBlock: {
      // A break or continue inside leaves at once, as in Jinja2: the text captured so far is
      // neither filtered nor written.
      Flow flow = Flow::kNormal;
      SLUICE_ASSIGN_OR_RETURN(std::string text, capture(stmt.bodies[0], &flow));
      if (flow != Flow::kNormal) return flow;
      SLUICE_ASSIGN_OR_RETURN(Value v, apply_filter_chain(*stmt.expr, Value::string(std::move(text))));
      Status s = emit(to_str(v));
      if (!s.is_ok()) return std::unexpected(positioned(s, stmt.pos));
      return Flow::kNormal;
    }
  }
  return Flow::kNormal;
}

Result<Interpreter::Flow> Interpreter::exec_if(const Stmt& stmt) {
  for (size_t i = 0; i < stmt.conditions.size(); ++i) {
    SLUICE_ASSIGN_OR_RETURN(Value cond, eval(*stmt.conditions[i]));
    if (cond.truthy()) return exec_body(stmt.bodies[i]);
  }
  return exec_body(stmt.else_body);
}

Status Interpreter::bind_targets(const std::vector<std::string>& targets, const Value& value, size_t pos) {
  if (targets.size() == 1) {
    assign(targets[0], value);
    return Status::ok();
  }
  SLUICE_CHAT_ASSIGN_OR_RETURN(std::vector<Value> parts, iterate(value, options_.limits.max_list_items));
  if (parts.size() != targets.size()) {
    return positioned(Status::error(fmt::format("cannot unpack {} values into {} names", parts.size(), targets.size())), pos);
  }
  for (size_t i = 0; i < targets.size(); ++i) assign(targets[i], parts[i]);
  return Status::ok();
}

Result<Interpreter::Flow> Interpreter::exec_for(const Stmt& stmt) {
  SLUICE_ASSIGN_OR_RETURN(Value iterable, eval(*stmt.expr));
  auto all = iterate(iterable, options_.limits.max_list_items);
  if (!all) return std::unexpected(positioned(all.error(), stmt.expr->pos));
  std::vector<Value> items;
  if (stmt.filter) {
    for (Value& item : *all) {
      frames_.emplace_back();
      Status bound = bind_targets(stmt.targets, item, stmt.pos);
      auto keep = bound.is_ok() ? eval(*stmt.filter) : Result<Value>(std::unexpected(bound));
      frames_.pop_back();
      if (!keep) return std::unexpected(keep.error());
      if (keep->truthy()) items.push_back(std::move(item));
    }
  } else {
    items = std::move(*all);
  }
  if (items.empty()) return exec_body(stmt.else_body);
  for (size_t i = 0; i < items.size(); ++i) {
    Status counted = count_iterations(1);
    if (!counted.is_ok()) return std::unexpected(positioned(counted, stmt.pos));
    frames_.emplace_back();
    Status bound = bind_targets(stmt.targets, items[i], stmt.pos);
    if (bound.is_ok()) assign("loop", make_loop(i, items));
    auto flow = bound.is_ok() ? exec_body(stmt.bodies[0]) : Result<Flow>(std::unexpected(bound));
    frames_.pop_back();
    if (!flow) return std::unexpected(flow.error());
    if (*flow == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Value Interpreter::make_loop(size_t index, const std::vector<Value>& items) {
  const int64_t n = static_cast<int64_t>(items.size());
  const int64_t i = static_cast<int64_t>(index);
  std::vector<std::pair<std::string, Value>> fields = {
      {"index", Value::integer(i + 1)},          {"index0", Value::integer(i)},
      {"revindex", Value::integer(n - i)},       {"revindex0", Value::integer(n - i - 1)},
      {"first", Value::boolean(i == 0)},         {"last", Value::boolean(i == n - 1)},
      {"length", Value::integer(n)},             {"depth", Value::integer(1)},
      {"depth0", Value::integer(0)},
      {"previtem", i > 0 ? items[index - 1] : Value::undefined("'previtem' is undefined")},
      {"nextitem", i + 1 < n ? items[index + 1] : Value::undefined("'nextitem' is undefined")},
  };
  auto cycle = std::make_shared<CallableObject>();
  cycle->name = "cycle";
  cycle->fn = [i](Interpreter&, const CallArgs& args) -> Result<Value> {
    if (args.positional.empty()) return Error("no items for cycling given");
    return args.positional[static_cast<size_t>(i) % args.positional.size()];
  };
  fields.emplace_back("cycle", Value::callable(std::move(cycle)));
  return Value::dict(std::move(fields), /*keys_unique=*/true);
}

Status Interpreter::exec_set(const Stmt& stmt, Flow* flow) {
  Value value;
  if (stmt.expr) {
    SLUICE_CHAT_ASSIGN_OR_RETURN(value, eval(*stmt.expr));
  } else {
    // A break or continue inside a block set leaves before the assignment, as in Jinja2.
    SLUICE_CHAT_ASSIGN_OR_RETURN(std::string text, capture(stmt.bodies[0], flow));
    if (*flow != Flow::kNormal) return Status::ok();
    value = Value::string(std::move(text));
    if (stmt.filter) {
      SLUICE_CHAT_ASSIGN_OR_RETURN(value, apply_filter_chain(*stmt.filter, value));
    }
  }
  if (value.nesting_depth() > options_.limits.max_json_depth) {
    return positioned(Status::error("value nested too deeply"), stmt.pos);
  }
  if (stmt.set_attribute) {
    Value target = lookup(stmt.targets[0]);
    if (!target.is_namespace()) {
      return positioned(Status::error("cannot assign attribute on non-namespace object"), stmt.pos);
    }
    target.as_namespace()->set(stmt.targets[1], std::move(value));
    return Status::ok();
  }
  return bind_targets(stmt.targets, value, stmt.pos);
}

Status Interpreter::exec_macro_definition(const Stmt& stmt) {
  auto fn = std::make_shared<CallableObject>();
  fn->name = stmt.name;
  const Stmt* macro = &stmt;
  fn->fn = [macro](Interpreter& interp, const CallArgs& args) { return interp.call_macro(*macro, args); };
  assign(stmt.name, Value::callable(std::move(fn)));
  return Status::ok();
}

Result<Value> Interpreter::call_macro(const Stmt& macro, const CallArgs& args) {
  if (call_depth_ >= options_.limits.max_call_depth) {
    return Error("macro '{}': calls nested deeper than {}", macro.name, options_.limits.max_call_depth);
  }
  if (args.positional.size() > macro.params.size()) {
    return Error("macro '{}' takes not more than {} argument(s)", macro.name, macro.params.size());
  }
  Frame frame;
  for (size_t i = 0; i < macro.params.size(); ++i) {
    const MacroParam& param = macro.params[i];
    const Value* kw = args.find_keyword(param.name);
    if (i < args.positional.size()) {
      frame.emplace_back(param.name, args.positional[i]);
    } else if (kw != nullptr) {
      frame.emplace_back(param.name, *kw);
    } else if (param.default_value) {
      SLUICE_ASSIGN_OR_RETURN(Value v, eval(*param.default_value));
      frame.emplace_back(param.name, std::move(v));
    } else {
      frame.emplace_back(param.name, Value::undefined(fmt::format("'{}' is undefined", param.name)));
    }
  }
  for (const auto& [name, value] : args.keyword) {
    const bool known = std::any_of(macro.params.begin(), macro.params.end(), [&](const MacroParam& p) { return p.name == name; });
    if (!known) return Error("macro '{}' takes no keyword argument '{}'", macro.name, name);
  }
  const size_t saved_floor = frame_floor_;
  frames_.push_back(std::move(frame));
  frame_floor_ = frames_.size() - 1;
  ++call_depth_;
  auto text = capture(macro.bodies[0]);
  --call_depth_;
  frames_.pop_back();
  frame_floor_ = saved_floor;
  if (!text) return std::unexpected(text.error());
  return Value::string(std::move(*text));
}

Result<std::string> Interpreter::capture(const Body& body, Flow* flow_out) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  auto flow = exec_body(body);
  out_ = saved;
  if (!flow) return std::unexpected(flow.error());
  if (flow_out) *flow_out = *flow;
  return buffer;
}

Result<Value> Interpreter::call(const Value& fn, const CallArgs& args) {
  if (fn.is_undefined()) return Error("{}", fn.undefined_hint());
  if (!fn.is_callable()) return Error("'{}' object is not callable", fn.type_name());
  return fn.as_callable().fn(*this, args);
}

}  // namespace sluice::chat
