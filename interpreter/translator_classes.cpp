// Classes during a trace: super(), class attributes bound as Python binds
// them (functions, staticmethod, classmethod, property; runtime/semantics/descriptors.h
// is the rule), the super/delattr/setattr/hasattr builtins (a module's
// stores and deletes themselves: nn_module.h), and PUSH_NULL.
//
// Everything here is decided at trace time from values the guards already
// pin: a module tracker's class is fixed by its identity and version guard,
// a class tracker's by its identity guard, and super's lookup depends only
// on those two classes.
#include "interpreter/instruction_translator.h"
#include "interpreter/nn_module.h"

#include "runtime/nn/module.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/descriptors.h"
#include "runtime/semantics/super.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::interpreter {

using namespace kiln::runtime;
namespace vars = kiln::variables;

namespace {

// The class a tracker stands for, when it is a class (a global or a cell
// holding one, a class made constant): null otherwise.
ClassObj* class_of_tracker(const VT& v) {
  if ((v->is(VTKind::Opaque) || v->is(VTKind::Constant)) && v->value.is(Kind::Class)) return v->value.as<ClassObj>();
  return nullptr;
}

}  // namespace

VT InstructionTranslator::bind_class_attr_traced(const Value& attr, const VT& instance, ClassObj* cls,
                                                 const std::string& name) {
  // Only KBC functions and natives are traced as methods: anything else
  // bound (a Python function kiln could not translate) is a real bound
  // method, opaque to the trace (a call to it breaks, and the VM runs it).
  auto bound = [&](const Value& fn, const VT& self, const Value& self_value) -> VT {
    if (fn.is(Kind::Function) || fn.is(Kind::Builtin)) return vars::make_user_method(fn, self);
    auto bm = make_ref<BoundMethodObj>();
    bm->func = fn;
    bm->self = self_value;
    return vars::make_opaque(Value::object(Kind::BoundMethod, bm), nullptr);
  };
  switch (attr.kind()) {
    case Kind::Function:
    case Kind::Builtin:
      if (!instance) return from_value(attr);
      return bound(attr, instance, instance->value);
    case Kind::StaticMethod: return from_value(attr.as<MethodWrapperObj>()->func);
    case Kind::ClassMethod: {
      Value c = class_value(cls);
      return bound(attr.as<MethodWrapperObj>()->func, from_value(c), c);
    }
    case Kind::Property: {
      if (!instance) return from_value(attr);
      const PropertyObj* p = attr.as<PropertyObj>();
      if (p->fget.is_null() || p->fget.is_none())
        unsupported(BreakReason::attribute_error,
                    "property '" + name + "' of '" + cls->name + "' object has no getter");
      return call_function(from_value(p->fget), {instance}, nullptr);
    }
    default: return from_value(attr);
  }
}

VT InstructionTranslator::class_getattr(const VT& cls_vt, const std::string& name) {
  ClassObj* cls = class_of_tracker(cls_vt);
  auto key = intern(name);
  if (const Value* v = cls->lookup(key.get())) return bind_class_attr_traced(*v, nullptr, cls, name);
  Value v = class_getattr_or_null(cls_vt->value, key.get());  // __name__, __qualname__
  if (!v.is_null()) return from_value(v);
  unsupported(BreakReason::attribute_error, "type object '" + cls->name + "' has no attribute '" + name + "'");
}

// ----------------------------------------------------------------- super --

VT InstructionTranslator::super_of(std::vector<VT> args) {
  VT type, obj;
  if (args.empty()) {
    // CPython's zero-argument super: this frame's first argument (its
    // cell, when a closure captured it) and its __class__ free variable.
    // The VM raises the RuntimeErrors; a trace that would meet one breaks.
    int32_t first = code_->first_arg_local;
    if (first == 0 && code_->argcount == 0) first = Code::kNoFirstArg;
    if (first < 0) unsupported(BreakReason::resume_state, "super() in a frame without its first argument");
    obj = locals_[size_t(first)];
    for (size_t j = 0; j < code_->cell_from_arg.size(); ++j)
      if (code_->cell_from_arg[j] == first) obj = cells_[j]->items[0];
    for (size_t i = 0; i < code_->freevars.size(); ++i)
      if (code_->freevars[i] == "__class__") type = cells_[code_->cellvars.size() + i]->items[0];
    if (!obj || !type) unsupported(BreakReason::python_error, "super() without __class__ or its first argument");
  } else if (args.size() == 2) {
    type = args[0];
    obj = args[1];
  } else {
    unsupported(BreakReason::python_error, "super() with " + std::to_string(args.size()) + " argument(s)");
  }
  type = realize(type);
  obj = realize(obj);
  if (type->is(VTKind::Opaque) && type->value.is(Kind::Foreign)) return host_super_of(type, obj);
  if (!class_of_tracker(type))
    unsupported(BreakReason::untraced_object, "super() over " + type->str() + " (not a kiln class)");
  if (!obj->is_module() && !class_of_tracker(obj))
    unsupported(BreakReason::untraced_object, "super() of " + obj->str());
  if (obj->is(VTKind::UnspecializedNNModule)) obj = nn_module::specialized(*this, obj);  // its class is read
  Value sup;
  try {
    sup = make_super(type->value, obj->value);
  } catch (const Error&) {
    unsupported(BreakReason::python_error, "super() raising an error");  // the VM raises it
  }
  VT vt = vars::make_opaque(sup, nullptr);
  vt->self = obj;  // residual code rebuilds super(type, obj) from it (convert_frame.cpp)
  vt->items = {type};
  return vt;
}

VT InstructionTranslator::super_getattr(const VT& sup, const std::string& name) {
  const auto* s = sup->value.as<SuperObj>();
  auto key = intern(name);
  if (name != "__class__")
    if (const Value* v = super_find(s, key.get()))
      return bind_class_attr_traced(*v, s->obj.is(Kind::Class) ? nullptr : sup->self, s->obj_type.get(), name);
  if (name == "__thisclass__") return sup->items[0];
  if (name == "__self__") return sup->self;
  if (name == "__self_class__") return from_value(class_value(s->obj_type.get()));
  unsupported(BreakReason::attribute_error, "'super' object has no attribute '" + name + "'");
}

// ---------------------------------------------- stores and deletes ---

void InstructionTranslator::op_DELETE_ATTR(const Instr& i) {
  nn_module::var_delattr(*this, pop(), code_->names[size_t(i.a)]->s);
}

void InstructionTranslator::op_PUSH_NULL(const Instr&) { push(nullptr); }

// ----------------------------------------------------- the builtins --

VT InstructionTranslator::trace_class_builtin(const Value& builtin, std::vector<VT>& args, const TupleObj* kwnames) {
  const std::string& name = builtin.as<BuiltinObj>()->name;
  // object's __reduce_ex__ and copyreg.__newobj__ (copy.deepcopy), its
  // __delattr__: translator_user_defined.cpp; object's __reduce__ /
  // __getstate__ called directly are CPython's to run.
  if (const int m = object_method_index(builtin); m >= 0) {
    if (m == int(ObjectMethod::ReduceEx)) return reduce_ex(args, kwnames);
    if (m == int(ObjectMethod::Delattr) && !kwnames && args.size() == 2) {
      const VT attr = realize(args[1]);
      if (is_constant(attr) && constant_value(attr).is(Kind::Str)) {
        nn_module::var_delattr(*this, args[0], constant_value(attr).as_str());
        return const_vt(Value::none());
      }
    }
    unsupported(BreakReason::untraced_method, name + "()");
  }
  if (builtin.is_same(copyreg_newobj())) return copyreg_newobj_call(args, kwnames);
  static const std::string forward = ".forward";
  const bool native_forward = name.size() > forward.size() &&
                              name.compare(name.size() - forward.size(), forward.size(), forward) == 0;
  const bool generic_getattribute = builtin.is_same(object_getattribute());
  const bool generic_setattr_call = builtin.is_same(object_setattr());
  if (name != "super" && name != "delattr" && name != "setattr" && name != "hasattr" && name != "getattr" &&
      !native_forward && !generic_getattribute && !generic_setattr_call && host_init_index(builtin) < 0)
    return nullptr;
  if (kwnames) return nullptr;  // the generic path decides (and breaks)
  // super().__init__() reaching object's, dict's or OrderedDict's own:
  // without arguments it leaves the object as it is; with some, CPython runs it.
  if (host_init_index(builtin) >= 0) {
    if (args.size() != 1) unsupported(BreakReason::untraced_method, name + "() with arguments");
    return const_vt(Value::none());
  }
  for (VT& a : args) a = realize(a);
  // super().__getattribute__(name) / __setattr__(name, value) reaching
  // object's: translator_user_defined.cpp.
  if (generic_getattribute || generic_setattr_call) {
    if (args.size() != (generic_getattribute ? 2u : 3u) || !is_constant(args[1]) ||
        !constant_value(args[1]).is(Kind::Str))
      return nullptr;
    if (generic_getattribute) return generic_getattr(args[0], constant_value(args[1]).as_str(), /*or_missing=*/false);
    generic_setattr(args[0], constant_value(args[1]).as_str(), args[2], /*generic=*/true);
    return const_vt(Value::none());
  }
  if (name == "super") return super_of(args);
  if (native_forward) {
    // A built-in class's forward called on its module as a method
    // (`super().forward(x)` in a subclass of nn.Linear): traced as its ops.
    if (args.size() != 2 || !args[0]->is_module()) return nullptr;
    auto* m = args[0]->value.as<ModuleObj>();
    Ref<ClassObj> cls = builtin_module_class(m->cls->builtin_kind());
    const Value* fwd = cls ? cls->methods.find("forward") : nullptr;
    if (!fwd || !fwd->is_same(builtin)) return nullptr;
    return nn_module::builtin_forward(*this, nn_module::specialized(*this, args[0]), args[1], false);
  }
  if (args.size() < 2 || !is_constant(args[1]) || !constant_value(args[1]).is(Kind::Str)) return nullptr;
  const std::string attr = constant_value(args[1]).as_str();
  if (name == "delattr" && args.size() == 2) {
    nn_module::var_delattr(*this, args[0], attr);
    return const_vt(Value::none());
  }
  // hasattr / getattr with a default of a name deleted earlier in this
  // trace: gone, unless the class or a custom __getattr__ answers.
  if ((name == "hasattr" && args.size() == 2) || (name == "getattr" && args.size() == 3)) {
    if (!args[0]->is_module()) return nullptr;
    auto* m = args[0]->value.as<ModuleObj>();
    auto overlay = ctx_.attr_overlay.find({m, attr});
    if (overlay == ctx_.attr_overlay.end() || overlay->second) return nullptr;
    static const Ref<StrObj> getattr_name = intern("__getattr__");
    if (m->cls->lookup(intern(attr).get()) || m->cls->lookup(getattr_name.get()) || attr == "__class__" ||
        attr == "training")
      return nullptr;  // the generic path (it may break)
    return name == "hasattr" ? const_vt(Value::boolean(false)) : args[2];
  }
  // setattr(module, 'name', v) on a property: its setter, inlined.
  if (name == "setattr" && args.size() == 3 && args[0]->is_module() && args[0]->source &&
      nn_module::store_through_property(*this, args[0], attr, args[2]))
    return const_vt(Value::none());
  return nullptr;
}

}  // namespace kiln::interpreter
