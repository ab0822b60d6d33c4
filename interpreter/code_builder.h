// CodeBuilder: builds a KBC Code object from C++ — parameters, locals,
// constants, names, labels and instructions — and verifies it. The
// assembler is written on top of it, and so is the C++ embedding API.
//
//   CodeBuilder b("scale");
//   b.arg("x");
//   b.arg("k", Value::integer(2));           // k=2
//   b.emit(Opcode::LOAD_FAST, b.local("x"));
//   b.emit(Opcode::LOAD_FAST, b.local("k"));
//   b.emit(Opcode::BINARY_OP, int(BinOp::MUL));
//   b.emit(Opcode::RETURN_VALUE);
//   Ref<FunctionObj> fn = b.make_function(globals);
//
// Parameters come first and in Python's order (positional, `*args`,
// keyword-only, `**kwargs`); the first local(), deref(), emit() or label
// operation seals them, after which every local index is final. In the
// Code, varnames are positional, keyword-only, *args, **kwargs, then the
// other locals (CPython's layout).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/value/code.h"
#include "runtime/value/name_map.h"
#include "runtime/value/value.h"

namespace kiln::interpreter {

using runtime::Opcode;
using runtime::Value;

class CodeBuilder {
 public:
  // A jump target; create with new_label(), place with bind().
  struct Label {
    int id = -1;
  };

  explicit CodeBuilder(std::string name, std::string filename = "<builder>");
  // Builds into an existing (empty) Code object instead of a new one, so
  // that references to it (e.g. `@f` constants parsed before `.func f`) can
  // be handed out before it is built.
  CodeBuilder(std::string name, std::string filename, runtime::Ref<runtime::Code> into);

  void set_qualname(std::string qualname);
  // Defaults to the line of the first instruction.
  void set_first_line(int line);
  // `.generator`: the function's call makes a generator (runtime::kGenerator).
  void set_generator() {
    check_open();
    generator_ = true;
  }

  // ----- parameters (before anything else) -----
  // A positional parameter; `default_value` Null means none. Once one
  // positional parameter has a default, every later one needs one.
  void arg(std::string name, Value default_value = Value::null());
  // `/`: the positional parameters declared so far are positional-only
  // (at least one; once, before *args and keyword-only parameters).
  void posonly_marker();
  // `*args`
  void var_args(std::string name);
  // A keyword-only parameter (after *args or after a bare `*`); Null
  // default: required.
  void kwonly_arg(std::string name, Value default_value = Value::null());
  // `**kwargs`, last.
  void var_kw(std::string name);

  // ----- variables -----
  // The index of local `name`, declaring it after the parameters if new.
  int32_t local(std::string_view name);
  // The index of an existing local or parameter (seals the parameters).
  std::optional<int32_t> find_local(std::string_view name);
  // Cell and free variables, declared before the first emit()/find_deref();
  // a cellvar may share its name with a parameter (the cell is then
  // initialised from it).
  void cellvar(std::string name);
  void freevar(std::string name);
  // Renames cellvar `i` (only its name: the indices already emitted stay)
  // when no cell, free variable or local has that name; false otherwise.
  // `param_ok`: a parameter's name is free too (the verifier then starts
  // the cell from that parameter, as CPython's MAKE_CELL of an argument).
  bool rename_cellvar(size_t i, const std::string& name, bool param_ok = false);
  // The LOAD_DEREF index of `name`: cellvars first, then freevars.
  std::optional<int32_t> find_deref(std::string_view name);

  // ----- constants and names (deduplicated) -----
  int32_t constant(const Value& v);
  int32_t name(std::string_view name);

  // ----- instructions -----
  // Line given to the following instructions.
  void set_line(int line) { line_ = line; }
  int line() const { return line_; }
  Label new_label();
  // Places `label` before the next emitted instruction.
  void bind(Label label);
  bool is_bound(Label label) const;
  void emit(Opcode op, int32_t a = 0, int32_t b = 0);
  // A jump instruction (operand a is the label).
  void emit(Opcode op, Label target, int32_t b = 0);
  size_t size() const;  // instructions emitted so far
  // An exception-table row (runtime/value/code.h ExceptionEntry): instructions
  // from `start` up to (not including) `end` are handled at `target`. Rows
  // keep the order they are added in (the first covering row wins). `end`
  // may be bound after the last instruction.
  void handler(Label start, Label end, Label target, int32_t depth, bool lasti);

  // Resolves labels and returns the Code; verifies it (and its code
  // constants) unless `verify` is false, in which case the caller must
  // run interpreter::verify before the code runs. A builder finishes once.
  runtime::Ref<runtime::Code> finish(bool verify = true);

  // After finish(): the defaults of a function over this code.
  const std::vector<Value>& defaults() const { return defaults_; }
  // One per keyword-only parameter, Null where required.
  const std::vector<Value>& kwdefaults() const { return kwdefaults_; }
  // finish() (if not done yet) and wrap the code in a function with these
  // defaults, no closure, and the given globals.
  runtime::Ref<runtime::FunctionObj> make_function(runtime::Ref<runtime::GlobalsObj> globals);

 private:
  void check_open() const;
  void check_params_open(const std::string& name);
  void check_new_variable(const std::string& name, const std::vector<std::string>& list, const char* what);
  void seal_params();
  void seal_derefs();
  [[noreturn]] void fail(const std::string& what) const;

  runtime::Ref<runtime::Code> code_;
  bool finished_ = false;
  bool params_sealed_ = false;
  bool derefs_sealed_ = false;

  std::vector<std::string> positional_, kwonly_, locals_;
  std::optional<std::string> var_args_, var_kw_;
  bool generator_ = false;
  std::optional<size_t> posonly_;  // positional parameters before the `/`
  std::vector<Value> defaults_, kwdefaults_;

  std::unordered_map<std::string, int32_t> local_index_;
  std::unordered_map<std::string, int32_t> const_index_;
  std::unordered_map<const runtime::StrObj*, int32_t> name_index_;

  int line_ = 0;
  std::optional<int> first_line_;
  std::vector<int> label_pos_;          // instruction index, -1 unbound
  std::vector<size_t> label_uses_;      // instructions whose a is a label id
  struct PendingHandler {
    Label start, end, target;
    int32_t depth;
    bool lasti;
  };
  std::vector<PendingHandler> handlers_;
};

}  // namespace kiln::interpreter
