// Tracing the constructs the Python frontend maps to their own opcodes:
// sets (BUILD_SET, SET_ADD, SET_UPDATE), f-string fields (FORMAT_VALUE),
// f(**m) (DICT_MERGE), assert (LOAD_ASSERTION_ERROR) and imports.
//
// A set in a trace is a Constant tracker holding a SetObj of constants. It
// is never mutated in place: an update replaces the tracker's value with an
// exact copy (set_clone: the same table, so the same order as the VM's set
// mutated in place) changed as the VM changes it, so a SetObj that some
// real object or guard also holds stays as it was; every alias of the
// tracker (it is shared) sees the new value. A
// set that came from outside (it has a source) is only read: mutating it
// breaks, and the VM does it. Anything the VM would raise (an unhashable
// item, a duplicate keyword, a bad spec) breaks too, so the VM raises it.
#include "interpreter/instruction_translator.h"
#include "runtime/semantics/census.h"

#include "runtime/semantics/builtins.h"
#include "runtime/semantics/format.h"
#include "runtime/semantics/set_ops.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::interpreter {

using namespace kiln::runtime;
namespace vars = kiln::variables;

namespace {

// The known items of `items`, or a break naming what is not known.
std::vector<Value> constant_items(InstructionTranslator& tx, const std::vector<VT>& items, const char* what) {
  std::vector<Value> out;
  for (const VT& x0 : items) {
    VT x = tx.realize(x0);
    if (x->is(VTKind::Tensor)) unsupported(BreakReason::untraced_object, std::string("a tensor in ") + what);
    if (!tx.is_constant(x)) unsupported(BreakReason::traced_python_value, x->str() + " in " + what);
    out.push_back(tx.constant_value(x));
  }
  return out;
}

// set.update(items) (SET_UPDATE: set_update_internal, which merges a set's
// table and pre-sizes for a dict) or set.add(item) on an exact copy of the
// set tracker's value, which becomes its value.
void set_change(const VT& set, const Value& items, bool update, const char* what) {
  if (!set->is(VTKind::Constant) || !set->value.is(Kind::Set))
    unsupported(BreakReason::untraced_object, std::string(what) + " to " + set->str());
  if (set->source) unsupported(BreakReason::outside_mutation, std::string(what) + " to a set the function did not make");
  Value next = set_clone(set->value, false);
  try {
    if (update)
      set_update(next, items.is_same(set->value) ? next : items);
    else
      next.as<SetObj>()->add(items);
  } catch (const Error& e) {
    unsupported(BreakReason::python_error, std::string(what) + " raising " + e.what());
  }
  set->value = std::move(next);
}

}  // namespace

void InstructionTranslator::op_BUILD_SET(const Instr& i) {
  std::vector<Value> items = constant_items(*this, pop_n(size_t(i.a)), "a set display");
  Value set = make_set();
  try {
    for (const Value& v : items) set.as<SetObj>()->add(v);
  } catch (const Error& e) {
    unsupported(BreakReason::python_error, std::string("a set display raising ") + e.what());
  }
  push(vars::make_constant(std::move(set)));
}

void InstructionTranslator::op_SET_ADD(const Instr& i) {
  VT item = pop();
  set_change(realize(stack_[stack_.size() - size_t(i.a)]), constant_items(*this, {item}, "a set")[0], false,
             "SET_ADD");
}

void InstructionTranslator::op_SET_UPDATE(const Instr& i) {
  VT items = realize(pop());
  // What set_update_internal sees: a set or any constant as itself, a
  // dict's keys as a dict (its path sizes the table first), else the items.
  Value source;
  if (items->is(VTKind::Constant)) {
    source = items->value;
  } else if (items->is(VTKind::ConstDict)) {
    source = make_dict();
    for (const Value& k : items->keys) source.as<DictObj>()->set(k, Value::none());
  } else {
    source = make_list(constant_items(*this, unpack(items), "a set"));
  }
  set_change(realize(stack_[stack_.size() - size_t(i.a)]), source, true, "SET_UPDATE");
}

void InstructionTranslator::op_FORMAT_VALUE(const Instr& i) {
  const bool has_spec = i.a & 4;
  VT spec = has_spec ? realize(pop()) : nullptr;
  VT value = realize(pop());
  if (value->is(VTKind::Tensor)) unsupported(BreakReason::tensor_to_python, "formatting a tensor in an f-string");
  if (!is_constant(value) || (spec && !is_constant(spec)))
    unsupported(BreakReason::traced_python_value, "formatting " + value->str() + " in an f-string");
  Value sv = spec ? constant_value(spec) : Value::str("");
  try {
    if (!sv.is(Kind::Str)) throw_error(ErrorKind::TypeError, "FORMAT_VALUE spec is not a str");
    push(vars::make_constant(Value::str(format_field(constant_value(value), i.a & 3, sv.as_str()))));
  } catch (const Error& e) {
    unsupported(BreakReason::python_error, std::string("an f-string field raising ") + e.what());
  }
}

void InstructionTranslator::op_DICT_MERGE(const Instr& i) {
  VT mapping = realize(pop());
  VT dict = realize(stack_[stack_.size() - size_t(i.a)]);
  if (!dict->is(VTKind::ConstDict) || !mapping->is(VTKind::ConstDict))
    unsupported(BreakReason::untraced_object, "** of " + mapping->str());
  for (size_t k = 0; k < mapping->keys.size(); ++k) {
    for (const Value& key : dict->keys)
      if (values_equal(key, mapping->keys[k]))
        unsupported(BreakReason::python_error, "keyword argument '" + to_str(key) + "' given twice");
    dict->keys.push_back(mapping->keys[k]);
    dict->items.push_back(mapping->items[k]);
  }
  ctx_.side_effects.mark_mutated(dict);
}

void InstructionTranslator::op_LOAD_ASSERTION_ERROR(const Instr&) { push(vars::make_builtin(assertion_error())); }

// `import x` / `from x import y` in traced code: the module the host has
// loaded already, as the program's object (nothing runs, as Dynamo folds
// an import). An import that would run a module's code, or a relative one,
// breaks: CPython runs it, in the program's order. What the module's
// attributes give is guarded where they are read, as for a global module;
// sys.modules itself is not guarded (neither is it by Dynamo).
void InstructionTranslator::op_IMPORT_NAME(const Instr& i) {
  const auto* name = code_->consts[size_t(i.a)].as<runtime::StrObj>();
  VT fromlist = realize(stack_[stack_.size() - 1]);
  VT level = realize(stack_[stack_.size() - 2]);
  if (!is_constant(fromlist) || !is_constant(level))
    unsupported(BreakReason::untraced_object, "import of '" + name->s + "' with a computed fromlist or level");
  const Value lv = constant_value(level);
  if (!lv.is(Kind::Int) || lv.as_int() != 0)
    unsupported(BreakReason::untraced_object, "relative import of '" + name->s + "' (CPython runs it)");
  const Value fl = constant_value(fromlist);
  Value module = import_module(name, fl, lv, true);
  if (module.is_null())
    unsupported(BreakReason::untraced_object,
                "import of '" + name->s + "' that would load a module or look a name up (CPython runs it)");
  pop();
  pop();
  // Its own source (the module object itself): what the trace reads of it
  // is guarded at paths from there, and a residual reloads it as it is.
  // (`import a.b` gives the package a, `from a.b import c` a.b itself.)
  const bool top = fl.is_none() || (fl.is(Kind::Tuple) && fl.as<runtime::TupleObj>()->items.empty());
  push(vars::make_lazy(module, output_graph::const_source(module, top ? name->s.substr(0, name->s.find('.')) : name->s)));
}

void InstructionTranslator::op_IMPORT_FROM(const Instr& i) {
  VT module = realize(stack_.back());
  push(get_attr(module, code_->names[size_t(i.a)]->s));
}

}  // namespace kiln::interpreter

namespace kiln::interpreter {

// The __exit__ a traced null-context block calls on its way out (nothing to
// undo). Folded like any pure builtin; seeing it called closes the block.
const Value& null_context_exit() {
  static const Value* exit = [] {
    Value b = make_builtin("__exit__", [](CallContext&, const BuiltinObj&, const CallArgs&) { return Value::none(); });
    b.as<BuiltinObj>()->how = BuiltinHow::Fold;
    return new Value(census::permanent_value(b));  // process-lifetime: not a leak
  }();
  return *exit;
}

// `with torch.no_grad():` (ForeignVTable::null_context): traced as
// contextlib.nullcontext() (enter gives None), the block's BEFORE_WITH
// remembered so a break inside the block moves there
// (restart_before_null_with). Any other manager runs on the VM.
void InstructionTranslator::op_BEFORE_WITH(const Instr&) {
  VT mgr = realize(stack_.back());
  if (mgr->value.is(Kind::Foreign)) {
    const auto* f = mgr->value.as<ForeignObj>();
    if (f->vt->null_context && f->vt->null_context(f->handle)) {
      pop();
      push(vars::make_builtin(null_context_exit()));
      push(vars::make_constant(Value::none()));
      null_withs_.push_back(steps_);
      return;
    }
  }
  unsupported(BreakReason::exception_handling, "a with statement's __enter__");
}
void InstructionTranslator::op_WITH_EXCEPT_START(const Instr&) { unsupported(BreakReason::exception_handling, "a with statement's __exit__"); }

}  // namespace kiln::interpreter
