// nn.Module during a trace: the one home of what Dynamo keeps in
// variables/nn_module.py (NNModuleVariable, UnspecializedNNModuleVariable).
// Attribute reads (var_getattr: _parameters, _modules, _buffers, then the
// instance, the class, a user __getattr__), calls (call_function: hooks,
// lazy modules, Sequential unrolled, built-in forwards as ops, symbolic
// tracing's leaf modules), the traced walkers (trace_supported_methods:
// parameters(), named_*(), buffers(), children(), modules(), ModuleDict
// views) and attribute deletes/property stores on modules.
//
// Free functions over the translator, named as the seeds name them: each
// takes the translator as Dynamo's methods take `tx`. docs/architecture.md
// maps every seed function to its definition here.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "interpreter/instruction_translator.h"

namespace kiln::interpreter::nn_module {

// Which instance dict of a module getattr_helper reads.
enum class Field : uint8_t { parameters, modules, buffers };

// ---- attributes ----------------------------------------------------------

// module.name for an NNModule or UnspecializedNNModule tracker: this trace's
// own stores first (attr_overlay), then manually_trace_nn_module_getattr,
// the instance attributes, `training`, the class (bound as Python binds
// it), `__class__`, custom_getattr_fallback; else an attribute_error break.
// An unspecialized module's instance entries are wrapped at their own
// source (guarded by what they are); anything else specializes it first.
VT var_getattr(InstructionTranslator& tx, const VT& module, const std::string& name);
// The entry `name` of one of the module's dicts (a get_attr node once per
// tensor identity, a module tracker with its own source), or null.
VT getattr_helper(InstructionTranslator& tx, const VT& module, Field field, const std::string& name);
// _parameters, then _modules, then _buffers (DESIGN.md); null when none of
// them holds `name` (Dynamo raises there; kiln's caller goes on to the
// instance attributes, which torch's __getattr__ never reaches).
VT manually_trace_nn_module_getattr(InstructionTranslator& tx, const VT& module, const std::string& name);
// The class's own __getattr__, inlined on the module; null when it has none.
VT custom_getattr_fallback(InstructionTranslator& tx, const VT& module, const std::string& name);

// A module tracker for a read that depends on its whole structure: an
// UnspecializedNNModule gets its version guard now (once); others as is.
VT specialized(InstructionTranslator& tx, const VT& module);
// Breaks if an attribute store earlier in this trace changed what `m`'s
// dicts enumerate: they still show the old structure, so enumerating
// them (unrolling, len, iteration, parameters()) would trace the wrong one.
void check_structure_unchanged(InstructionTranslator& tx, const runtime::ModuleObj* m, const std::string& what);

// ---- calls ---------------------------------------------------------------

// module(*args) as torch's __call__ has it: forward pre-hooks, forward (a
// KBC forward inlined, a built-in one as its ops), forward hooks; a lazy
// module initialised by its first input; a leaf of symbolic tracing as one
// call_module node.
VT call_function(InstructionTranslator& tx, const VT& module, std::vector<VT> args,
                 const runtime::TupleObj* kwnames);
// The forward of the built-in class of `module` (Linear, ..., Sequential)
// as its ops, from the one table runtime/nn/builtin_forward.h: for a module
// call, and for `super().forward(x)` in a subclass.
VT builtin_forward(InstructionTranslator& tx, const VT& module, const VT& x, bool unspecialized);
// Symbolic tracing: one call_module node for a leaf module.
VT leaf_call(InstructionTranslator& tx, const VT& module, const std::vector<VT>& args);

// ---- traced methods ------------------------------------------------------

// parameters(), named_parameters(), buffers(), named_buffers(), children(),
// named_children(), modules(), named_modules() answered at trace time;
// null: not one of them (the caller breaks).
VT trace_supported_methods(InstructionTranslator& tx, BuiltinCall& call, std::string_view method);
// (qualified name, tracker) of every parameter of `module` (and, with
// `recurse`, of its submodules), each read through var_getattr.
std::vector<std::pair<std::string, VT>> collect_parameters(InstructionTranslator& tx, const VT& module, bool recurse);
// ModuleDict's keys(), values(), items(); null: not one of them.
VT trace_module_dict_method(InstructionTranslator& tx, BuiltinCall& call, std::string_view method);

// ---- stores and deletes --------------------------------------------------

// module.name = value when `name` is a property of its class: the setter
// inlined (a break when it has none). False: not a property.
bool store_through_property(InstructionTranslator& tx, const VT& module, const std::string& name, const VT& value);
// del module.name: a recorded side effect (or its property's deleter
// inlined); a break for anything but a module with a source.
void var_delattr(InstructionTranslator& tx, const VT& obj, const std::string& name);

}  // namespace kiln::interpreter::nn_module
