// The Jinja syntax tree: what jinja_parser builds and jinja_interpreter walks.
//
// Plain data. Every node keeps the byte offset (`pos`) of its first token in the normalised
// source, for error messages. Children are owned (unique_ptr); a null child means "absent"
// (a slice bound left out, a conditional without `else`).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace sluice::chat {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,  // literal
  kName,     // name
  kList,     // children: items
  kTuple,    // children: items
  kDict,     // children: key0, value0, key1, value1, ...
  kGetAttr,  // children[0] . name
  kGetItem,  // children[0] [ children[1] ]
  kSlice,    // children[0] [ children[1] : children[2] : children[3] ] (each bound may be null)
  kCall,     // children[0] ( children[1..] , kwargs )
  kFilter,   // children[0] | name ( children[1..] , kwargs ); children[0] null in {% filter %}
  kTest,     // children[0] is [not] name ( children[1..] , kwargs ); negated
  kUnary,    // op children[0]: "not", "-", "+"
  kBinary,   // children[0] op children[1]: "and" "or" "+" "-" "*" "/" "//" "%" "**" "~"
  kCompare,  // children[0] ops[0] children[1] ops[1] children[2] ... (chained, as Python)
  kCondExpr, // children[1] if children[0] else children[2] (children[2] may be null)
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  size_t pos = 0;
  Value literal;
  std::string name;  // variable, attribute, filter, test or operator
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare: "==" "!=" "<" "<=" ">" ">=" "in" "notin"
  bool negated = false;          // kTest: `is not`
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
  kText,        // text
  kOutput,      // {{ expr }}
  kIf,          // if cond_i: bodies_i ... else: else_body
  kFor,         // for targets in expr [if filter]: bodies[0] else: else_body
  kSet,         // set target [. attr] = expr, or {% set target %}bodies[0]{% endset %}
  kMacro,       // macro name(params): bodies[0]
  kBreak,
  kContinue,
  kFilterBlock, // {% filter f %}bodies[0]{% endfilter %}: expr is the filter chain
  kGeneration,  // {% generation %}bodies[0]{% endgeneration %} (transformers' marker)
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null when required
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  size_t pos = 0;
  std::string text;
  ExprPtr expr;                     // output/for iterable/set value/filter chain
  ExprPtr filter;                   // for ... if filter
  std::vector<ExprPtr> conditions;  // if/elif conditions, one per bodies entry
  std::vector<Body> bodies;
  Body else_body;
  std::vector<std::string> targets;  // for/set names; set: [name] or [name, attribute]
  bool set_attribute = false;        // `set ns.attr = ...`
  std::string name;                  // macro name
  std::vector<MacroParam> params;
};

struct TemplateAst {
  std::string source;  // normalised source, for positions in runtime errors
  Body body;
};

}  // namespace sluice::chat
