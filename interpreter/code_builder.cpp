#include "interpreter/code_builder.h"

#include <algorithm>

#include "interpreter/kbc_syntax.h"
#include "interpreter/verifier.h"

namespace kiln::interpreter {

using runtime::Code;
using runtime::OperandKind;
using runtime::Ref;

CodeBuilder::CodeBuilder(std::string name, std::string filename)
    : CodeBuilder(std::move(name), std::move(filename), runtime::make_ref<Code>()) {}

CodeBuilder::CodeBuilder(std::string name, std::string filename, Ref<Code> into) : code_(std::move(into)) {
  code_->name = std::move(name);
  code_->qualname = code_->name;
  code_->filename = std::move(filename);
}

void CodeBuilder::fail(const std::string& what) const {
  throw_error(ErrorKind::SyntaxError, what + " in function '" + code_->qualname + "'");
}

void CodeBuilder::check_open() const {
  if (finished_) fail("CodeBuilder used after finish()");
}

void CodeBuilder::set_qualname(std::string qualname) {
  check_open();
  code_->qualname = std::move(qualname);
}

void CodeBuilder::set_first_line(int line) {
  check_open();
  first_line_ = line;
}

// ----- parameters ----------------------------------------------------------

void CodeBuilder::check_params_open(const std::string& name) {
  check_open();
  if (params_sealed_) fail("parameter '" + name + "' declared after locals or instructions");
  auto taken = [&](const std::string& n) { return n == name; };
  if (std::any_of(positional_.begin(), positional_.end(), taken) ||
      std::any_of(kwonly_.begin(), kwonly_.end(), taken) || var_args_ == name || var_kw_ == name)
    fail("duplicate parameter '" + name + "'");
  if (var_kw_) fail("parameter '" + name + "' after **" + *var_kw_);
}

void CodeBuilder::arg(std::string name, Value default_value) {
  check_params_open(name);
  if (var_args_ || !kwonly_.empty())
    fail("positional parameter '" + name + "' after *args or keyword-only parameters");
  if (default_value.is_null() && !defaults_.empty())
    fail("parameter '" + name + "' without a default follows a parameter with a default");
  if (!default_value.is_null()) defaults_.push_back(std::move(default_value));
  positional_.push_back(std::move(name));
}

void CodeBuilder::posonly_marker() {
  check_open();
  if (params_sealed_) fail("'/' declared after locals or instructions");
  if (posonly_) fail("'/' may appear only once");
  if (var_args_ || !kwonly_.empty() || var_kw_) fail("'/' must come before *, *args, keyword-only parameters and **");
  if (positional_.empty()) fail("at least one parameter must precede '/'");
  posonly_ = positional_.size();
}

void CodeBuilder::var_args(std::string name) {
  check_params_open(name);
  if (var_args_) fail("second *args parameter '" + name + "'");
  if (!kwonly_.empty()) fail("*" + name + " after keyword-only parameters");
  var_args_ = std::move(name);
}

void CodeBuilder::kwonly_arg(std::string name, Value default_value) {
  check_params_open(name);
  kwdefaults_.push_back(std::move(default_value));
  kwonly_.push_back(std::move(name));
}

void CodeBuilder::var_kw(std::string name) {
  check_params_open(name);
  var_kw_ = std::move(name);
}

// Fixes the varnames layout: positional, keyword-only, *args, **kwargs.
void CodeBuilder::seal_params() {
  if (params_sealed_) return;
  params_sealed_ = true;
  std::vector<std::string> params = positional_;
  params.insert(params.end(), kwonly_.begin(), kwonly_.end());
  if (var_args_) params.push_back(*var_args_);
  if (var_kw_) params.push_back(*var_kw_);
  for (auto& p : params) {
    local_index_.emplace(p, int32_t(code_->varnames.size()));
    code_->varnames.push_back(p);
  }
}

// ----- variables -----------------------------------------------------------

int32_t CodeBuilder::local(std::string_view name) {
  check_open();
  if (auto i = find_local(name)) return *i;
  auto index = int32_t(code_->varnames.size());
  code_->varnames.emplace_back(name);
  local_index_.emplace(std::string(name), index);
  return index;
}

std::optional<int32_t> CodeBuilder::find_local(std::string_view name) {
  seal_params();
  auto it = local_index_.find(std::string(name));
  if (it == local_index_.end()) return std::nullopt;
  return it->second;
}

void CodeBuilder::check_new_variable(const std::string& name, const std::vector<std::string>& list,
                                     const char* what) {
  check_open();
  if (derefs_sealed_) fail(std::string(what) + " '" + name + "' declared after instructions");
  if (std::find(list.begin(), list.end(), name) != list.end())
    fail(std::string("duplicate ") + what + " '" + name + "'");
}

void CodeBuilder::cellvar(std::string name) {
  check_new_variable(name, code_->cellvars, "cell variable");
  if (std::find(code_->freevars.begin(), code_->freevars.end(), name) != code_->freevars.end())
    fail("'" + name + "' is both a cell and a free variable");
  code_->cellvars.push_back(std::move(name));
}

bool CodeBuilder::rename_cellvar(size_t i, const std::string& name, bool param_ok) {
  auto taken = [&](const std::vector<std::string>& list) {
    return std::find(list.begin(), list.end(), name) != list.end();
  };
  auto local_taken = [&] {
    auto it = std::find(code_->varnames.begin(), code_->varnames.end(), name);
    const size_t nparams = positional_.size() + kwonly_.size() + (var_args_ ? 1 : 0) + (var_kw_ ? 1 : 0);
    return it != code_->varnames.end() && !(param_ok && size_t(it - code_->varnames.begin()) < nparams);
  };
  if (name.empty() || i >= code_->cellvars.size() || taken(code_->cellvars) || taken(code_->freevars) ||
      local_taken())
    return false;
  code_->cellvars[i] = name;
  return true;
}

void CodeBuilder::freevar(std::string name) {
  check_new_variable(name, code_->freevars, "free variable");
  if (std::find(code_->cellvars.begin(), code_->cellvars.end(), name) != code_->cellvars.end())
    fail("'" + name + "' is both a cell and a free variable");
  code_->freevars.push_back(std::move(name));
}

void CodeBuilder::seal_derefs() { derefs_sealed_ = true; }

std::optional<int32_t> CodeBuilder::find_deref(std::string_view name) {
  seal_derefs();
  const auto& cells = code_->cellvars;
  const auto& frees = code_->freevars;
  if (auto it = std::find(cells.begin(), cells.end(), name); it != cells.end())
    return int32_t(it - cells.begin());
  if (auto it = std::find(frees.begin(), frees.end(), name); it != frees.end())
    return int32_t(cells.size() + (it - frees.begin()));
  return std::nullopt;
}

// ----- constants and names -------------------------------------------------

int32_t CodeBuilder::constant(const Value& v) {
  check_open();
  std::string key = kbc::constant_key(v);
  if (!key.empty()) {
    if (auto it = const_index_.find(key); it != const_index_.end()) return it->second;
  }
  auto index = int32_t(code_->consts.size());
  code_->consts.push_back(v);
  if (!key.empty()) const_index_.emplace(std::move(key), index);
  return index;
}

int32_t CodeBuilder::name(std::string_view name) {
  check_open();
  Ref<runtime::StrObj> s = runtime::intern(name);
  if (auto it = name_index_.find(s.get()); it != name_index_.end()) return it->second;
  auto index = int32_t(code_->names.size());
  code_->names.push_back(s);
  name_index_.emplace(s.get(), index);
  return index;
}

// ----- instructions --------------------------------------------------------

CodeBuilder::Label CodeBuilder::new_label() {
  check_open();
  label_pos_.push_back(-1);
  return Label{int(label_pos_.size() - 1)};
}

void CodeBuilder::bind(Label label) {
  check_open();
  if (label.id < 0 || size_t(label.id) >= label_pos_.size()) fail("bind() of a label from another builder");
  if (label_pos_[size_t(label.id)] >= 0) fail("label bound twice");
  label_pos_[size_t(label.id)] = int(code_->instrs.size());
}

bool CodeBuilder::is_bound(Label label) const {
  return label.id >= 0 && size_t(label.id) < label_pos_.size() && label_pos_[size_t(label.id)] >= 0;
}

void CodeBuilder::emit(Opcode op, int32_t a, int32_t b) {
  check_open();
  seal_params();
  seal_derefs();
  code_->instrs.push_back(runtime::Instr{op, a, b, line_});
}

void CodeBuilder::emit(Opcode op, Label target, int32_t b) {
  if (runtime::opcode_info(op).a != OperandKind::Jump)
    fail(std::string(runtime::opcode_info(op).name) + " does not take a label");
  if (target.id < 0 || size_t(target.id) >= label_pos_.size()) fail("jump to a label from another builder");
  emit(op, target.id, b);
  label_uses_.push_back(code_->instrs.size() - 1);
}

size_t CodeBuilder::size() const { return code_->instrs.size(); }

void CodeBuilder::handler(Label start, Label end, Label target, int32_t depth, bool lasti) {
  check_open();
  for (Label l : {start, end, target})
    if (l.id < 0 || size_t(l.id) >= label_pos_.size()) fail("exception handler with a label from another builder");
  handlers_.push_back({start, end, target, depth, lasti});
}

Ref<Code> CodeBuilder::finish(bool verify_code) {
  check_open();
  seal_params();
  seal_derefs();
  for (size_t pc : label_uses_) {
    auto& ins = code_->instrs[pc];
    int pos = label_pos_[size_t(ins.a)];
    if (pos < 0) fail("jump at instruction " + std::to_string(pc) + " to a label that is never bound");
    ins.a = pos;
  }
  for (const PendingHandler& h : handlers_) {
    auto pos = [&](Label l) {
      int p = label_pos_[size_t(l.id)];
      if (p < 0) fail("exception handler row with a label that is never bound");
      return int32_t(p);
    };
    code_->exception_table.push_back({pos(h.start), pos(h.end), pos(h.target), h.depth, h.lasti});
  }
  Code& c = *code_;
  c.argcount = int32_t(positional_.size());
  c.posonlyargcount = int32_t(posonly_.value_or(0));
  c.kwonlyargcount = int32_t(kwonly_.size());
  c.flags = (var_args_ ? runtime::kVarArgs : 0u) | (var_kw_ ? runtime::kVarKw : 0u) | (generator_ ? runtime::kGenerator : 0u);
  c.first_line = first_line_ ? *first_line_ : (c.instrs.empty() ? line_ : c.instrs[0].line);
  finished_ = true;
  if (verify_code) verify(c);
  return code_;
}

Ref<runtime::FunctionObj> CodeBuilder::make_function(Ref<runtime::GlobalsObj> globals) {
  if (!finished_) finish();
  auto fn = runtime::make_ref<runtime::FunctionObj>();
  fn->code = code_;
  fn->defaults = defaults_;
  fn->kwdefaults = kwdefaults_;
  fn->globals = std::move(globals);
  return fn;
}

}  // namespace kiln::interpreter
