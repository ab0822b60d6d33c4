// The kinds of value whose behaviour lives in a library above semantics/:
// tensors (runtime/tensor/: Python's operators, indexing and methods on a
// tensor are torch's ops) and modules (runtime/nn/: the root class's
// methods, the containers, torch's nested repr, the built-in classes).
// Python's semantics reach them through these slots, as CPython reaches a
// type's behaviour through its type slots, so semantics/ includes nothing
// above it (tools/check_runtime_layering.py).
//
// Each library fills its table once, from a static initialiser in its
// <kind>_slots.cpp, which runtime/CMakeLists.txt keeps in every link of the
// library (its anchor symbol). Nothing runs a program before static
// initialisation ends, so a slot read finds its table filled; reading one
// in a link without the library is an internal error naming it.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/value/code.h"
#include "runtime/value/name_map.h"
#include "runtime/value/value.h"

namespace kiln::runtime {

struct ClassObj;
struct ModuleObj;

struct TensorSlots {
  // The registry op Python's operator maps to (value/operators.def), or -1.
  int (*op_for_binary)(BinOp op);
  int (*op_for_compare)(CmpOp op);
  int (*op_for_unary)(UnOp op);
  // The id of the registry op called `name`, or -1.
  int (*op_id)(std::string_view name);
  // The registry op `op` (an id from the slots above) on `args`.
  Value (*call_op)(int op, const CallArgs& args);
  Value (*getitem)(const Tensor& t, const Value& key);
  void (*setitem)(const Tensor& t, const Value& key, const Value& value);
  // t.name as a method: the registry op of that name taking a tensor (its
  // builtin, self first), or Null.
  Value (*method)(const StrObj* name);
  // Adds the builtin of every registry op to KBC's builtins namespace.
  void (*add_builtins)(NameMap& builtins);
  // Seeds the generator behind rand, randn and dropout (manual_seed()).
  void (*manual_seed)(uint64_t seed);
};

struct ModuleSlots {
  // The root class `Module`, holding torch.nn.Module's methods.
  Ref<ClassObj> (*base_class)();
  // Container modules (Sequential, ModuleList, ModuleDict): m[key], len(m),
  // iter(m)'s items; TypeError for any other module.
  Value (*getitem)(const Value& module, const Value& key);
  int64_t (*len)(const Value& module);
  std::vector<Value> (*iter_items)(const Value& module);
  std::string (*repr)(const ModuleObj* m);  // torch's nested repr
  // Adds the built-in module classes (Linear, ...) to KBC's builtins.
  void (*add_builtins)(NameMap& builtins);
};

const TensorSlots& tensor_slots();
const ModuleSlots& module_slots();
// A registry op semantics calls by a fixed name (abs(t), iter(t)'s rows):
// `static const int op = tensor_op_id("select");` resolves it once.
inline int tensor_op_id(std::string_view name) { return tensor_slots().op_id(name); }
inline Value call_tensor_op(int op, std::initializer_list<Value> positional) {
  CallArgs args;
  args.args = positional.begin();
  args.nargs = positional.size();
  return tensor_slots().call_op(op, args);
}

// From the owning library's static initialiser only.
void set_tensor_slots(const TensorSlots* slots);
void set_module_slots(const ModuleSlots* slots);

}  // namespace kiln::runtime
