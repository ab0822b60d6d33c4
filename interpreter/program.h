// A Program: what the assembler makes of one .kbc file. Its globals hold
// every top-level function (as a Function value) and class (as a Class
// value); the builtins (runtime/semantics/builtins.h) back them up.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/nn/module.h"
#include "runtime/value/code.h"
#include "runtime/value/name_map.h"

namespace kiln::interpreter {

using runtime::ClassObj;
using runtime::Code;
using runtime::FunctionObj;
using runtime::GlobalsObj;
using runtime::Ref;

struct ProgramItem {
  // Exactly one is set: a top-level function, or a class (its methods are in
  // cls->methods, in file order as `methods`).
  Ref<FunctionObj> function;
  Ref<ClassObj> cls;
  std::vector<Ref<FunctionObj>> methods;
};

struct Program {
  // Functions and their globals reference each other, and so may code
  // constants naming code (`@f`), which counting alone never frees. When the
  // last copy of a Program goes, this owner empties the namespace and cuts
  // the code cycles that nothing outside the Program still holds. A function
  // kept past its Program then finds no globals (NameError), like a Python
  // function whose module was torn down; a method's `__class__` cell is
  // emptied too (its class holds the method: a cycle); its code and the code it names stay
  // whole (and a code cycle among them is then never freed: there is no
  // cycle collector). Declared first, so destroyed last: after `items` and
  // `globals` have let go of the functions and codes they hold.
  std::shared_ptr<void> namespace_owner;

  std::string filename;
  Ref<GlobalsObj> globals;
  // Top-level functions and classes in file order (what the disassembler
  // prints). Functions with free variables are listed but not bound in
  // globals: only MAKE_FUNCTION can give them a closure.
  std::vector<ProgramItem> items;

  Program() = default;
  Program(const Program&) = default;
  Program(Program&&) noexcept = default;
  // By swapping: the replaced members then go as in a destruction, items
  // and globals before namespace_owner.
  Program& operator=(Program old) noexcept {
    std::swap(namespace_owner, old.namespace_owner);
    std::swap(filename, old.filename);
    std::swap(globals, old.globals);
    std::swap(items, old.items);
    return *this;
  }

  // The global `name` (function or class); Null when absent.
  runtime::Value global(std::string_view name) const;
};

}  // namespace kiln::interpreter
