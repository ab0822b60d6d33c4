// Python's descriptor protocol on kiln classes: what a class attribute (a
// function, a property, a staticmethod, a classmethod, anything else)
// gives when it is read through an instance or through the class, and
// assignment and deletion through a property, with CPython 3.11's errors.
//
// The rule the module lookup (class_model.h), super (super.h), class attribute
// reads (value_access.cpp) and the tracer all follow, so they cannot
// disagree:
//
//   attribute      via an instance `obj`         via the class `C`
//   function       bound method (obj)            the function
//   builtin        bound method (obj)            the builtin
//   staticmethod   the function                  the function
//   classmethod    the function bound to type(obj)   the function bound to C
//   property       fget(obj)                     the property object
//   anything else  itself                        itself
#pragma once

#include "runtime/semantics/class_model.h"

namespace kiln::runtime {

Value make_staticmethod(Value func);
Value make_classmethod(Value func);
// Property(fget, fset, fdel); fset/fdel Null when Python's has none.
Value make_property(Value fget, Value fset, Value fdel);

inline Value class_value(ClassObj* c) { return Value::object(Kind::Class, c); }

// `attr`, found on a class of `cls`'s chain, read through `instance` (a
// module whose class is `cls`), or through the class itself when instance
// is Null; `name` is the attribute's (for errors). A property's getter is
// called through ctx; without ctx the property comes back as itself.
Value bind_class_attr(CallContext* ctx, const Value& attr, const Value& instance, ClassObj* cls, const StrObj* name);

// C.name for a class value: its attributes bound as read through the class
// (table above), then __name__ / __qualname__. Null when it has none.
Value class_getattr_or_null(const Value& cls, const StrObj* name);

// obj.name = value / del obj.name on a module whose class has a property
// `name`: its fset / fdel is called, or CPython's AttributeError is raised
// ("property 'w' of 'Child' object has no setter"). False when `name` is
// not a property of the module's class (the caller stores or deletes the
// instance entry then).
bool property_set(CallContext& ctx, const Value& module, const StrObj* name, const Value& value);
bool property_delete(CallContext& ctx, const Value& module, const StrObj* name);

// The builtin delattr(obj, name): del_attr (value_ops.h) by name.
Value builtin_delattr(CallContext& ctx, const std::vector<Value>& a);

// Python's error texts, shared with the tracer's break reasons.
std::string no_setter_message(const std::string& attr, const std::string& cls);
std::string no_deleter_message(const std::string& attr, const std::string& cls);

}  // namespace kiln::runtime
