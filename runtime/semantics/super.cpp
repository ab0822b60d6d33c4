// Python's super() over kiln classes (super.h).
#include "runtime/semantics/super.h"

#include "runtime/semantics/census.h"

#include "runtime/semantics/descriptors.h"
#include "runtime/semantics/signature.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::runtime {

Value make_super(const Value& type, const Value& obj) {
  if (!type.is(Kind::Class))
    throw_error(ErrorKind::TypeError, "super() argument 1 must be a type, not " + type_name(type));
  auto s = make_ref<SuperObj>();
  s->type = type;
  if (!obj.is_null() && !obj.is_none()) {
    // CPython's supercheck: a class deriving from type (super inside a
    // classmethod), else an instance of such a class.
    ClassObj* t = nullptr;
    if (obj.is(Kind::Class) && obj.as<ClassObj>()->is_subclass_of(s->type_class())) t = obj.as<ClassObj>();
    else if (obj.is(Kind::Module) && obj.as<ModuleObj>()->cls->is_subclass_of(s->type_class()))
      t = obj.as<ModuleObj>()->cls.get();
    if (!t) throw_error(ErrorKind::TypeError, "super(type, obj): obj must be an instance or subtype of type");
    s->obj = obj;
    s->obj_type = Ref<ClassObj>(t);
  } else {
    s->obj = Value::null();
  }
  return Value::object(Kind::Super, s);
}

namespace {
Value& host_super() {
  static Value* v = new Value(Value::null());
  return *v;
}
}  // namespace

void set_host_super(Value fn) { host_super() = std::move(fn); }

Value builtin_super(CallContext& ctx, const std::vector<Value>& a) {
  Value type = a[0], obj = a[1];
  if (type.is_null()) ctx.zero_arg_super(type, obj);
  if (type.is(Kind::Foreign) && !host_super().is_null()) {
    if (obj.is_null()) return ctx.call(host_super(), {type});
    return ctx.call(host_super(), {type, obj});
  }
  return make_super(type, obj);
}

const Value* super_find(const SuperObj* s, const StrObj* name, ClassObj** owner) {
  if (s->obj.is_null()) return nullptr;
  // obj_type's chain passes through `type` (make_super checked it): the
  // search starts at the class after it.
  for (ClassObj* c = s->type_class()->base.get(); c; c = c->base.get())
    if (const Value* v = c->find_own(name)) {
      if (owner) *owner = c;
      return v;
    }
  // torch's Module.__getattr__, for `super().__getattr__(name)` in a
  // class's own __getattr__ (the dicts were searched before it was called:
  // what is left is the AttributeError). Not in the base class's table,
  // where every module would seem to have a custom __getattr__.
  if (name->s == "__getattr__" && s->obj.is(Kind::Module)) {
    static const Value base_getattr = census::permanent_value(make_native(
        "Module.__getattr__", "self, name", [](CallContext& ctx, const std::vector<Value>& a) -> Value {
          if (!a[0].is(Kind::Module) || !a[1].is(Kind::Str))
            throw_error(ErrorKind::TypeError, "Module.__getattr__(self, name) expects a module and a str");
          const std::string& cls = a[0].as<ModuleObj>()->class_name();
          throw_error(ErrorKind::AttributeError, "'" + cls + "' object has no attribute '" + a[1].as_str() + "'");
        }));
    if (owner) *owner = module_base_class().get();
    return &base_getattr;
  }
  return nullptr;
}

Value super_getattr_or_null(CallContext& ctx, const Value& super, const StrObj* name) {
  const auto* s = super.as<SuperObj>();
  // __class__ is super's own (CPython skips the lookup for it).
  if (name->s != "__class__")
    if (const Value* v = super_find(s, name)) {
      // Bound as read through obj, or through obj_type when obj is that
      // class itself (super() in a classmethod).
      const bool through_class = s->obj.is(Kind::Class);
      return bind_class_attr(&ctx, *v, through_class ? Value::null() : s->obj, s->obj_type.get(), name);
    }
  if (name->s == "__thisclass__") return s->type;
  if (name->s == "__self__") return s->obj.is_null() ? Value::none() : s->obj;
  if (name->s == "__self_class__") return s->obj_type ? class_value(s->obj_type.get()) : Value::none();
  return Value::null();
}

void super_attribute_error(const StrObj* name) {
  throw_error(ErrorKind::AttributeError, "'super' object has no attribute '" + name->s + "'");
}

const Value& method_type() {
  static const Value fn = census::permanent_value(
      make_native("types.MethodType", "function, instance, /", [](CallContext&, const std::vector<Value>& a) -> Value {
        auto bm = make_ref<BoundMethodObj>();
        bm->func = a[0];
        bm->self = a[1];
        return Value::object(Kind::BoundMethod, bm);
      }));
  return fn;
}

std::string super_repr(const SuperObj* s) {
  return "<super: <class '" + s->type_class()->name + "'>, " + (s->obj_type ? "<" + s->obj_type->name + " object>" : "NULL") +
         ">";
}

const Value& object_getattribute() {
  static const Value fn = census::permanent_value(make_native(
      "object.__getattribute__", "self, name, /", [](CallContext& ctx, const std::vector<Value>& a) -> Value {
        if (!a[1].is(Kind::Str))
          throw_error(ErrorKind::TypeError, "attribute name must be string, not '" + type_name(a[1]) + "'");
        const std::string& name = a[1].as_str();
        if (a[0].is(Kind::Foreign)) {
          // A host object: its generic lookup through the seam, which only
          // answers where no user code runs; the rest is the host's.
          const auto* f = a[0].as<ForeignObj>();
          Value out;
          switch (f->vt->lookup_attr ? f->vt->lookup_attr(f->handle, name, nullptr, out, nullptr)
                                     : ForeignAttr::Undecided) {
            case ForeignAttr::Found: return out;
            case ForeignAttr::Method: {
              auto bm = make_ref<BoundMethodObj>();
              bm->func = std::move(out);
              bm->self = a[0];
              return Value::object(Kind::BoundMethod, bm);
            }
            case ForeignAttr::Absent:
              throw_error(ErrorKind::AttributeError, "'" + type_name(a[0]) + "' object has no attribute '" + name + "'");
            default:
              throw_error(ErrorKind::TypeError, "object.__getattribute__ of a host object reads '" + name +
                                                    "' through code kiln does not run (its host runs it)");
          }
        }
        return get_attr(ctx, a[0], a[1].as<StrObj>());  // kiln's own objects have Python's generic lookup
      }));
  return fn;
}

const Value& object_setattr() {
  static const Value fn = census::permanent_value(make_native(
      "object.__setattr__", "self, name, value, /", [](CallContext& ctx, const std::vector<Value>& a) -> Value {
        if (!a[1].is(Kind::Str))
          throw_error(ErrorKind::TypeError, "attribute name must be string, not '" + type_name(a[1]) + "'");
        if (a[0].is(Kind::Foreign)) {
          // A host object: stored by its host only where that is the generic store.
          const auto* f = a[0].as<ForeignObj>();
          Value unused;
          const Value from_type = Value::null();
          if (!f->vt->lookup_attr ||
              f->vt->lookup_attr(f->handle, "__setattr__", &from_type, unused, nullptr) != ForeignAttr::GenericSetattr)
            throw_error(ErrorKind::TypeError, "object.__setattr__ of a host object with its own __setattr__ (its host runs it)");
          f->vt->setattr(f->handle, a[1].as_str(), a[2]);
          return Value::none();
        }
        set_attr(ctx, a[0], intern(a[1].as_str()), a[2]);
        return Value::none();
      }));
  return fn;
}

const Value& host_init(int which) {
  static const char* const names[] = {"object.__init__", "dict.__init__", "OrderedDict.__init__"};
  static const Value fns[3] = {
#define KILN_HOST_INIT(i)                                                                                   \
  census::permanent_value(make_native(names[i], "self, /, *args, **kwargs",                                 \
                                      [](CallContext&, const std::vector<Value>& a) -> Value {              \
                                        if (a[1].as<TupleObj>()->items.empty() && a[2].as<DictObj>()->index.empty()) \
                                          return Value::none();                                             \
                                        throw_error(ErrorKind::TypeError, std::string(names[i]) +           \
                                                                              " with arguments (its host runs it)"); \
                                      }))
      KILN_HOST_INIT(0), KILN_HOST_INIT(1), KILN_HOST_INIT(2)
#undef KILN_HOST_INIT
  };
  return fns[which];
}

const Value& object_method(int which) {
  static const Value fns[kNumObjectMethods] = {
#define KILN_OBJECT_METHOD(i)                                                                            \
  census::permanent_value(make_native(std::string("object.") + kObjectMethods[i], "self, /, *args",     \
                                      [](CallContext&, const std::vector<Value>&) -> Value {            \
                                        throw_error(ErrorKind::TypeError, std::string("object.") +       \
                                                                              kObjectMethods[i] +        \
                                                                              " (its host runs it)");    \
                                      }))
      KILN_OBJECT_METHOD(0), KILN_OBJECT_METHOD(1), KILN_OBJECT_METHOD(2), KILN_OBJECT_METHOD(3)
#undef KILN_OBJECT_METHOD
  };
  static_assert(kNumObjectMethods == 4, "one stand-in per kObjectMethods name");
  return fns[which];
}

int object_method_index(const Value& v) {
  for (int i = 0; i < kNumObjectMethods; ++i)
    if (v.is_same(object_method(i))) return i;
  return -1;
}

const Value& copyreg_newobj() {
  static const Value fn = census::permanent_value(
      make_native("copyreg.__newobj__", "cls, /, *args", [](CallContext&, const std::vector<Value>&) -> Value {
        throw_error(ErrorKind::TypeError, "copyreg.__newobj__ (its host runs it)");
      }));
  return fn;
}

int host_init_index(const Value& v) {
  for (int i = 0; i < 3; ++i)
    if (v.is_same(host_init(i))) return i;
  return -1;
}

}  // namespace kiln::runtime
