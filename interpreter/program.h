// A Program: what the assembler makes of one .kbc file. Its globals hold
// every top-level function (as a Function value) and class (as a Class
// value); the builtins (runtime/builtins.h) back them up.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/code.h"
#include "runtime/module.h"
#include "runtime/name_map.h"

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
  std::string filename;
  Ref<GlobalsObj> globals;
  // Top-level functions and classes in file order (what the disassembler
  // prints). Functions with free variables are listed but not bound in
  // globals: only MAKE_FUNCTION can give them a closure.
  std::vector<ProgramItem> items;

  // Functions and their globals reference each other, which counting alone
  // never frees. When the last copy of a Program goes, this owner empties
  // the namespace to break the cycles. A function kept past its Program
  // then finds no globals (NameError), like a Python function whose module
  // was torn down; a method's `__class__` cell is emptied too (its class
  // holds the method: a cycle). (Code constants naming their own code stay
  // a cycle.)
  std::shared_ptr<void> namespace_owner;

  // The global `name` (function or class); Null when absent.
  runtime::Value global(std::string_view name) const;
};

}  // namespace kiln::interpreter
