// Modules as Python's semantics see them (semantics/kind_slots.h): the root
// class, the containers, torch's repr and the built-in classes, filled into
// ModuleSlots when this library is linked.
#include "runtime/nn/module.h"
#include "runtime/semantics/kind_slots.h"

namespace kiln::runtime {

namespace {

const ModuleSlots kModuleSlots = {
    root_module_class,
    module_getitem,
    module_len,
    module_iter_items,
    module_repr,
    [](NameMap& builtins) {
#define KILN_BM_GLOBAL(name, ...) \
  builtins.set(#name, Value::object(Kind::Class, builtin_module_class(BuiltinModule::name)));
      KILN_BUILTIN_MODULES(KILN_BM_GLOBAL)
#undef KILN_BM_GLOBAL
    },
};

const bool installed = (set_module_slots(&kModuleSlots), true);

}  // namespace

// runtime/CMakeLists.txt asks every link for this symbol, which keeps this
// object, and so the initialiser above, in it.
extern "C" const bool* kiln_module_slots_anchor() { return &installed; }

}  // namespace kiln::runtime
