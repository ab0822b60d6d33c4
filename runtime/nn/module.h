// torch.nn.Module's behaviour over the instances of semantics/class_model.h:
// the built-in module classes, registering parameters, buffers and
// children, forward hooks and __call__, LazyLinear's first call, the
// walkers (named_parameters, named_modules, ...), the containers
// (Sequential, ModuleList, ModuleDict), train/eval and state_dict.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/semantics/class_model.h"

namespace kiln::runtime {
// The root class `Module` with torch.nn.Module's methods; semantics reaches
// it as module_base_class() (ModuleSlots::base_class).
Ref<ClassObj> root_module_class();
// The class object of a built-in module (Linear, ...).
Ref<ClassObj> builtin_module_class(BuiltinModule kind);

void register_parameter(ModuleObj* m, std::string_view name, const Value& param);
void register_buffer(ModuleObj* m, std::string_view name, const Value& tensor);
void add_module(ModuleObj* m, std::string_view name, const Value& child);
int64_t add_forward_pre_hook(ModuleObj* m, Value fn);
int64_t add_forward_hook(ModuleObj* m, Value fn);
bool remove_hook(ModuleObj* m, int64_t id);  // false if no such hook

// LazyLinear's first call: parameters sized from the input's last dim, the
// module becomes a Linear. Reads only the input's sizes (meta tensors work).
void materialize_lazy(ModuleObj* m, const CallArgs& args);

// __call__: pre-hooks, forward, hooks, in registration order; a lazy module
// is materialised from its first input before forward runs.
// `forward`: what runs as the module's forward (null: its class's), e.g.
// the compiled form a residual calls between the hooks it keeps.
Value module_call(CallContext& ctx, const Value& module, const CallArgs& args, const Value* forward = nullptr);

// Walks, in registration order, deduplicated by identity (torch's
// remove_duplicate) unless `dedupe` is false, skipping None. Names are
// qualified from `m` ("layers.3.fc.weight").
std::vector<std::pair<std::string, Value>> named_parameters(ModuleObj* m, bool recurse = true, bool dedupe = true);
std::vector<std::pair<std::string, Value>> named_buffers(ModuleObj* m, bool recurse = true, bool dedupe = true);
// torch's `prefix=` of the named walkers: "p.name", and "p" for the root
// module's own "" (named_modules).
std::vector<std::pair<std::string, Value>> with_prefix(std::vector<std::pair<std::string, Value>> items,
                                                       const std::string& prefix);
std::vector<std::pair<std::string, Value>> named_children(ModuleObj* m);
// Includes `m` itself as "" first; each module once (torch's
// remove_duplicate), or without `dedupe` under every path (only a cycle cut).
std::vector<std::pair<std::string, Value>> named_modules(ModuleObj* m, bool dedupe = true);

// Container modules (Sequential, ModuleList, ModuleDict): m[i] / m[key],
// len(m), iter(m) (children, or ModuleDict's keys). TypeError otherwise.
Value module_getitem(const Value& module, const Value& key);
int64_t module_len(const Value& module);
std::vector<Value> module_iter_items(const Value& module);
std::string module_repr(const ModuleObj* m);  // torch's nested repr

void set_training(ModuleObj* m, bool mode);  // recursive, like train(mode)

// Parameters and buffers by qualified name (a dict of tensors).
Value state_dict(ModuleObj* m);
// Copies values into the existing tensors; shape/dtype-checked; strict:
// missing or unexpected keys are an error listing them.
void load_state_dict(ModuleObj* m, const Value& dict);

}  // namespace kiln::runtime
