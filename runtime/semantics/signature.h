// Python-style argument binding for native callables (builtins, built-in
// module methods): a signature written as text, "input, dim=None, *,
// keepdim=False", parsed once, binding CallArgs to one Value per parameter.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "runtime/value/value.h"

namespace kiln::runtime {

struct Param {
  std::string name;
  bool varargs = false;  // *name: remaining positionals, as a tuple
  bool varkw = false;    // **name: remaining keywords, as a dict
  bool kwonly = false;   // after `*` or `*name`
  bool posonly = false;  // before `/`: no keyword names it
  bool has_default = false;
  Value default_value;
};

class Signature {
 public:
  // `fname` is used in error messages ("len() takes 1 positional argument").
  // A `/` makes the parameters before it positional-only, as in Python.
  // Defaults may be None, True, False, ints, floats or 'strings'; `name=?`
  // is optional with no default (the callee sees Null when it is absent).
  // With `lone_sequence_varargs`, a `*name` that receives exactly one
  // tuple/list takes it as the whole sequence: torch's zeros(2, 3) ==
  // zeros((2, 3)). (Not for Python builtins: zip([a, b]) is not zip(a, b).)
  Signature(std::string fname, std::string_view text, bool lone_sequence_varargs = false);

  const std::string& name() const { return fname_; }
  const std::vector<Param>& params() const { return params_; }
  int index_of(std::string_view param) const;  // -1 if absent

  // One Value per parameter, in order; Python's binding errors as TypeError.
  std::vector<Value> bind(const CallArgs& args) const;

 private:
  std::string fname_;
  std::vector<Param> params_;
  bool lone_sequence_varargs_ = false;
};

// A Builtin value whose arguments are bound by `signature` before `fn` runs
// (`a` holds one Value per parameter). Methods list `self` first.
using NativeFn = Value (*)(CallContext& ctx, const std::vector<Value>& a);
Value make_native(std::string name, std::string_view signature, NativeFn fn);
// A method of a built-in type (`type`.`method`, e.g. list.append): the
// first argument must be of `self_kind`, or it is Python's TypeError
// ("descriptor 'append' for 'list' objects doesn't apply to a 'int'
// object"), never a reinterpretation. A caller's own Python container of
// that kind (a Foreign list, dict or set) gets its own method called: a
// residual `list.append(L['acc'], 1)` appends to the caller's list.
Value make_native_method(Kind self_kind, const std::string& type, const std::string& method,
                         std::string_view signature, NativeFn fn);

}  // namespace kiln::runtime
