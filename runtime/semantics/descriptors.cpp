// Python's descriptor protocol on kiln classes (descriptors.h).
#include "runtime/semantics/descriptors.h"

#include <vector>

#include "runtime/semantics/value_ops.h"

namespace kiln::runtime {

namespace {

Value wrap_method(Kind kind, Value func) {
  auto w = make_ref<MethodWrapperObj>();
  w->func = std::move(func);
  return Value::object(kind, w);
}

Value bind(const Value& func, const Value& self) {
  auto bm = make_ref<BoundMethodObj>();
  bm->func = func;
  bm->self = self;
  return Value::object(Kind::BoundMethod, bm);
}

const PropertyObj* property_of(const Value& module, const StrObj* name) {
  return class_property(module.as<ModuleObj>()->cls.get(), name);
}

}  // namespace

Value make_staticmethod(Value func) { return wrap_method(Kind::StaticMethod, std::move(func)); }
Value make_classmethod(Value func) { return wrap_method(Kind::ClassMethod, std::move(func)); }

Value make_property(Value fget, Value fset, Value fdel) {
  Value p = make_property(std::move(fget));
  p.as<PropertyObj>()->fset = std::move(fset);
  p.as<PropertyObj>()->fdel = std::move(fdel);
  return p;
}

std::string no_setter_message(const std::string& attr, const std::string& cls) {
  return "property '" + attr + "' of '" + cls + "' object has no setter";
}
std::string no_deleter_message(const std::string& attr, const std::string& cls) {
  return "property '" + attr + "' of '" + cls + "' object has no deleter";
}

Value bind_class_attr(CallContext* ctx, const Value& attr, const Value& instance, ClassObj* cls, const StrObj* name) {
  const bool through_class = instance.is_null();
  switch (attr.kind()) {
    case Kind::Function:
    case Kind::Builtin: return through_class ? attr : bind(attr, instance);
    case Kind::StaticMethod: return attr.as<MethodWrapperObj>()->func;
    case Kind::ClassMethod: return bind(attr.as<MethodWrapperObj>()->func, class_value(cls));
    case Kind::Property: {
      if (through_class || !ctx) return attr;
      const PropertyObj* p = attr.as<PropertyObj>();
      if (p->fget.is_null() || p->fget.is_none())
        throw_error(ErrorKind::AttributeError, "property '" + name->s + "' of '" + cls->name + "' object has no getter");
      return ctx->call(p->fget, {instance});
    }
    default: return attr;
  }
}

Value class_getattr_or_null(const Value& cls, const StrObj* name) {
  auto* c = cls.as<ClassObj>();
  if (const Value* v = c->lookup(name)) return bind_class_attr(nullptr, *v, Value::null(), c, name);
  if (name->s == "__name__") return Value::str(c->name);
  if (name->s == "__qualname__") return Value::str(c->qualname.empty() ? c->name : c->qualname);
  return Value::null();
}

bool property_set(CallContext& ctx, const Value& module, const StrObj* name, const Value& value) {
  const PropertyObj* p = property_of(module, name);
  if (!p) return false;
  if (p->fset.is_null() || p->fset.is_none())
    throw_error(ErrorKind::AttributeError, no_setter_message(name->s, type_name(module)));
  ctx.call(p->fset, {module, value});
  return true;
}

bool property_delete(CallContext& ctx, const Value& module, const StrObj* name) {
  const PropertyObj* p = property_of(module, name);
  if (!p) return false;
  if (p->fdel.is_null() || p->fdel.is_none())
    throw_error(ErrorKind::AttributeError, no_deleter_message(name->s, type_name(module)));
  ctx.call(p->fdel, {module});
  return true;
}

Value builtin_delattr(CallContext& ctx, const std::vector<Value>& a) {
  if (!a[1].is(Kind::Str))
    throw_error(ErrorKind::TypeError, "attribute name must be string, not '" + type_name(a[1]) + "'");
  del_attr(ctx, a[0], intern(a[1].as_str()).get());
  return Value::none();
}

}  // namespace kiln::runtime
