// Plain Python objects during a trace (Dynamo's UserDefinedObjectVariable):
// attribute reads as CPython's lookup makes them, and super() over their
// classes. What runs no user code is read now under guards (an instance
// __dict__ entry, a class constant: ForeignVTable::lookup_attr); what is
// user code is inlined, never called: a class's own __getattribute__, a
// property's getter, a __getattr__ on a miss, the method super() finds.
//
// A transformers config is the case this was written for: its class
// defines __getattribute__ (an alias table: config.hidden_size reads
// n_embd) over a mixin's __getattribute__ (per-layer checks), which both
// end in super().__getattribute__(key), i.e. object.__getattribute__.
// Each forward reads a dozen config fields, so a break per read was a
// dozen graphs per model.
//
// Guards pin every lookup the trace made (output_graph/source.h): the
// class attribute each inlined function came from (TypeAttr: the class's
// __getattribute__, the property, the function after a super() class), and
// each value object.__getattribute__ read (GenericAttr, Absent when it
// found nothing). A class changed after compiling fails them, so the next
// call traces again.
#include "interpreter/instruction_translator.h"

#include "runtime/semantics/super.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::interpreter {

using namespace kiln::runtime;
namespace vars = kiln::variables;
using output_graph::generic_attr_source;
using output_graph::type_attr_source;

namespace {

const ForeignObj* foreign_of(const VT& v) {
  if (!v->is(VTKind::Opaque) || !v->value.is(Kind::Foreign)) return nullptr;
  const auto* f = v->value.as<ForeignObj>();
  return f->vt->lookup_attr ? f : nullptr;
}

// Where a Python object's class lookups are guarded: its own source, or,
// for one made in this trace, its empty instance (MadeHere::pin; its
// class is pinned by the call that made it).
const output_graph::SourceRef& pin_of(const VT& obj) { return obj->made ? obj->made->pin : obj->source; }

// A Python object whose reads the trace can pin: one the program passed
// in (it has a source) or one made in this trace.
bool traced_object(const VT& obj) { return foreign_of(obj) && (obj->source || obj->made); }


std::string no_attribute(const VT& obj, const std::string& name) {
  return "'" + type_name(obj->value) + "' object has no attribute '" + name + "'";
}

// Where the trace's own stores into a Python object are kept
// (TraceContext::attr_overlay): by the object's identity, not its handle.
std::pair<const void*, std::string> overlay_key(const VT& obj, const std::string& name) {
  return {object_identity(obj->value), name};
}

}  // namespace

// The class lookup of `name` for `obj` (after class `after`; Null: from
// type(obj)), pinned by a guard on what it found; `wrapped`, when given,
// receives that tracker (a class constant's, guarded like any value read
// at a source: a container by its contents).
ForeignAttr InstructionTranslator::class_lookup(const VT& obj, const std::string& name, const Value& after,
                                               Value& out, VT* wrapped) {
  const ForeignObj* f = foreign_of(obj);
  Value raw;
  const ForeignAttr found = f->vt->lookup_attr(f->handle, name, &after, out, &raw);
  if (found == ForeignAttr::Absent) {
    ctx_.builder.absent_guard(type_attr_source(pin_of(obj), name, after));
  } else if (found != ForeignAttr::Undecided) {
    VT vt = ctx_.builder.wrap(raw, type_attr_source(pin_of(obj), name, after));
    if (wrapped) *wrapped = std::move(vt);
  }
  return found;
}

// The meaning of a class attribute the lookup found, read through `obj`:
// a function bound to it, a property's getter run on it, object's generic
// __getattribute__ bound to it; a plain value (a class constant) is the
// tracker class_lookup wrapped it in.
VT InstructionTranslator::bind_found(ForeignAttr found, const Value& attr, const VT& wrapped, const VT& obj) {
  switch (found) {
    case ForeignAttr::Found: return wrapped;
    case ForeignAttr::Method: return vars::make_user_method(attr, obj);
    case ForeignAttr::Property: return call_function(from_value(attr), {obj}, nullptr);
    case ForeignAttr::GenericGetattribute: return vars::make_user_method(object_getattribute(), obj);
    case ForeignAttr::GenericSetattr: return vars::make_user_method(object_setattr(), obj);
    default: return nullptr;
  }
}

// A method read off obj (a fresh bound method per read, wrapped at its own
// source): its self is obj's own tracker, so what it reads of self is read
// at obj's own paths. (Through the method's `__self__` path, a KV cache's
// tensor was guarded at one path per method that read it, and each became
// dynamic in turn: a recompile per path.)
VT InstructionTranslator::bound_to_tracker(VT method, const VT& obj) {
  if (method->is(VTKind::UserMethod) && method->self &&
      object_identity(method->self->value) == object_identity(obj->value))
    method->self = obj;
  return method;
}

VT InstructionTranslator::user_object_getattr(const VT& obj, const std::string& name) {
  if (!traced_object(obj)) return nullptr;
  // type(obj).__getattribute__ decides: Python's generic one, or the
  // class's own, inlined as CPython would call it.
  Value getattribute;
  const ForeignAttr how = class_lookup(obj, "__getattribute__", Value::null(), getattribute);
  if (how == ForeignAttr::Method)
    return call_function(vars::make_user_method(getattribute, obj), {const_vt(intern_value(name))}, nullptr);
  if (how != ForeignAttr::GenericGetattribute) return nullptr;
  if (VT v = generic_getattr(obj, name, /*or_missing=*/true)) return v;
  // A miss: the class's __getattr__, inlined, or Python's AttributeError.
  Value getattr_fn;
  const ForeignAttr fallback = class_lookup(obj, "__getattr__", Value::null(), getattr_fn);
  if (fallback == ForeignAttr::Method)
    return call_function(vars::make_user_method(getattr_fn, obj), {const_vt(intern_value(name))}, nullptr);
  if (fallback != ForeignAttr::Absent) return nullptr;
  throw Unsupported{BreakReason::attribute_error, no_attribute(obj, name), {}, -1, std::nullopt, {}, true};
}

// object.__getattribute__ on an object made in this trace: its instance
// __dict__ is a tracker, so only its class is looked up (and guarded),
// in Python's order: a data descriptor (a property), the __dict__, then
// what the class holds.
VT InstructionTranslator::made_getattr(const VT& obj, const std::string& name, bool or_missing) {
  const VT& dict = vars::made_dict(*obj);
  if (name == "__dict__") return dict;
  if (name == "__class__") return obj->items[0];
  Value attr;
  VT wrapped;
  const ForeignAttr found = class_lookup(obj, name, Value::null(), attr, &wrapped);
  if (found == ForeignAttr::Property) return call_function(from_value(attr), {obj}, nullptr);
  if (found == ForeignAttr::Undecided)  // a descriptor kiln does not trace: a __slots__ member, a classmethod, ...
    unsupported(BreakReason::untraced_object, "attribute '" + name + "' of " + obj->str() + " (its class's descriptor)");
  for (size_t i = 0; i < dict->keys.size(); ++i)
    if (dict->keys[i].is(Kind::Str) && dict->keys[i].as<StrObj>()->s == name) return dict->items[i];
  if (found != ForeignAttr::Absent) return bind_found(found, attr, wrapped, obj);
  if (or_missing) return nullptr;
  throw Unsupported{BreakReason::attribute_error, no_attribute(obj, name), {}, -1, std::nullopt, {}, true};
}

VT InstructionTranslator::generic_getattr(const VT& obj, const std::string& name, bool or_missing) {
  if (obj->made) return made_getattr(obj, name, or_missing);
  const ForeignObj* f = foreign_of(obj);
  if (!f || !obj->source) unsupported(BreakReason::untraced_object, "object.__getattribute__ of " + obj->str());
  // A store earlier in this trace: what the object holds by the time
  // this read runs (generic_setattr stores only where a read finds it).
  if (auto stored = ctx_.attr_overlay.find(overlay_key(obj, name)); stored != ctx_.attr_overlay.end())
    return stored->second;
  // The instance __dict__ as the program passed it in: stale once the
  // trace stored into the object (those stores are replayed after it).
  if (name == "__dict__") {
    auto first = ctx_.attr_overlay.lower_bound({object_identity(obj->value), std::string()});
    if (first != ctx_.attr_overlay.end() && first->first.first == object_identity(obj->value))
      unsupported(BreakReason::untraced_object, "the __dict__ of " + obj->str() + " after the trace stored into it");
  }
  Value v;
  switch (f->vt->lookup_attr(f->handle, name, nullptr, v, nullptr)) {
    case ForeignAttr::Found: return ctx_.builder.wrap(v, generic_attr_source(obj->source, name));
    case ForeignAttr::Method: {
      auto bm = make_ref<BoundMethodObj>();
      bm->func = std::move(v);
      bm->self = obj->value;
      return bound_to_tracker(ctx_.builder.wrap(Value::object(Kind::BoundMethod, bm), generic_attr_source(obj->source, name)),
                              obj);
    }
    case ForeignAttr::Property: {
      // A data descriptor: it wins over the instance __dict__, so pinning
      // the class attribute pins the read.
      Value getter;
      if (class_lookup(obj, name, Value::null(), getter) != ForeignAttr::Property)
        unsupported(BreakReason::untraced_object, "property '" + name + "' of " + obj->str());
      return call_function(from_value(getter), {obj}, nullptr);
    }
    case ForeignAttr::Absent:
      ctx_.builder.absent_guard(generic_attr_source(obj->source, name));
      if (or_missing) return nullptr;
      throw Unsupported{BreakReason::attribute_error, no_attribute(obj, name), {}, -1, std::nullopt, {}, true};
    default:
      unsupported(BreakReason::untraced_object,
                  "attribute '" + name + "' of " + obj->str() + " (reading it runs code kiln does not trace)");
  }
}

bool InstructionTranslator::user_object_setattr(const VT& obj, const std::string& name, const VT& value) {
  if (!traced_object(obj)) return false;
  Value setattr_fn;
  switch (class_lookup(obj, "__setattr__", Value::null(), setattr_fn)) {
    case ForeignAttr::Method:  // the class's own __setattr__, inlined
      call_function(vars::make_user_method(setattr_fn, obj), {const_vt(intern_value(name)), value}, nullptr);
      return true;
    case ForeignAttr::GenericSetattr: generic_setattr(obj, name, value, /*generic=*/false); return true;
    default: return false;
  }
}

void InstructionTranslator::generic_setattr(const VT& obj, const std::string& name, const VT& value, bool generic) {
  if (!traced_object(obj))
    unsupported(BreakReason::outside_mutation, "object.__setattr__ on " + obj->str());
  // Python's generic store goes to a data descriptor of the class when
  // there is one (a property's setter, a __slots__ member), else into the
  // instance __dict__, where a later read finds it (object.__getattribute__
  // looks at data descriptors first, then the __dict__). Only the second
  // is recorded; the class lookup's guard pins that it stays so.
  Value attr;
  switch (class_lookup(obj, name, Value::null(), attr)) {
    case ForeignAttr::Absent:
    case ForeignAttr::Found:   // a plain class value, which the instance's own shadows
    case ForeignAttr::Method:  // a function: not a data descriptor either
      break;
    default:
      unsupported(BreakReason::outside_mutation,
                  "attribute store on " + obj->str() + " through the class's descriptor '" + name + "'");
  }
  // The instance __dict__ must exist: a __slots__ class without one raises
  // AttributeError, which CPython raises (the identity guard pins the
  // object, and with it its layout: __class__ assignment keeps it).
  const ForeignObj* f = foreign_of(obj);
  Value dict;
  if (f->vt->lookup_attr(f->handle, "__dict__", nullptr, dict, nullptr) != ForeignAttr::Found)
    unsupported(BreakReason::outside_mutation, "attribute store on " + obj->str() + " (no instance __dict__)");
  if (obj->made) {  // its __dict__ tracker holds it; the residual makes the object with it
    const VT& d = vars::made_dict(*obj);
    vars::dict_set(d->keys, d->items, intern_value(name), value);
    return;
  }
  ctx_.attr_overlay[overlay_key(obj, name)] = value;
  ctx_.side_effects.attr_stores.push_back({obj, name, value, generic});
}

// del obj.name / delattr(obj, name) on an object made in this trace whose
// class keeps object's __delattr__: the name leaves its __dict__ tracker
// (the residual makes the object without it). A data descriptor of the
// class (a property's deleter, a __slots__ member) would take the delete
// instead: that breaks, as a missing name does (CPython raises the
// AttributeError).
void InstructionTranslator::made_delattr(const VT& obj, const std::string& name) {
  Value fn;
  if (class_lookup(obj, "__delattr__", Value::null(), fn) != ForeignAttr::Method || !is_object_method(fn, ObjectMethod::Delattr))
    unsupported(BreakReason::outside_mutation, "attribute deletion on " + obj->str() + " (its class's own __delattr__)");
  Value attr;
  switch (class_lookup(obj, name, Value::null(), attr)) {
    case ForeignAttr::Absent:
    case ForeignAttr::Found:
    case ForeignAttr::Method: break;
    default:
      unsupported(BreakReason::outside_mutation,
                  "attribute deletion on " + obj->str() + " through the class's descriptor '" + name + "'");
  }
  const VT& d = vars::made_dict(*obj);
  for (size_t i = 0; i < d->keys.size(); ++i)
    if (d->keys[i].is(Kind::Str) && d->keys[i].as<StrObj>()->s == name) {
      d->keys.erase(d->keys.begin() + ptrdiff_t(i));
      d->items.erase(d->items.begin() + ptrdiff_t(i));
      return;
    }
  throw Unsupported{BreakReason::attribute_error, no_attribute(obj, name), {}, -1, std::nullopt, {}, true};
}

VT InstructionTranslator::call_special_method(const VT& obj, const std::string& name, std::vector<VT> args) {
  if (!traced_object(obj)) return nullptr;
  Value fn;
  if (class_lookup(obj, name, Value::null(), fn) != ForeignAttr::Method) return nullptr;
  return call_function(vars::make_user_method(fn, obj), std::move(args), nullptr);
}

VT InstructionTranslator::call_python_method(const VT& callee, std::vector<VT>& args, const TupleObj* kwnames) {
  // (the method type cannot be subclassed: its name says what it is)
  if (!foreign_of(callee) || !callee->source || type_name(callee->value) != "method") return nullptr;
  VT fn = generic_getattr(callee, "__func__", /*or_missing=*/true);
  if (!fn || !fn->is(VTKind::UserFunction) || !fn->value.is(Kind::Function)) return nullptr;
  VT self = generic_getattr(callee, "__self__", /*or_missing=*/true);
  if (!self) return nullptr;
  return call_function(vars::make_user_method(fn->value, self), std::move(args), kwnames);
}

// Dynamo's UserDefinedDictVariable, for reads: dict's own get /
// __getitem__ / __contains__ reached on a dict subclass instance (through
// super() or a class that does not override them: foreign.cpp maps them to
// kiln's dict methods) read the object's storage at a literal key, pinned
// by a guard at that key (DictItem): present with what the value wraps
// to, or Absent. Stores into such an object are not traced (they break),
// so a read in the trace sees what the guard saw.
VT InstructionTranslator::user_dict_method(BuiltinCall& c, std::string_view m) {
  auto& args = c.args;
  const ForeignObj* f = args.empty() ? nullptr : foreign_of(args[0]);
  if (f && args[0]->made) {
    // An object made in this trace: dict's method on its storage tracker
    // (none: it is no dict, and the call raises TypeError on CPython).
    if (!vars::made_storage(*args[0])->is(VTKind::ConstDict)) return nullptr;
    args[0] = vars::made_storage(*args[0]);
    return trace_dict_method(c, m);
  }
  const bool get = m == "get", contains = m == "__contains__";
  if (!f || !f->vt->dict_storage_find || !args[0]->source || c.nkw || args.size() < 2 ||
      args.size() > (get ? 3u : 2u) || (!get && !contains && m != "__getitem__"))
    return nullptr;
  // A literal key, or a class (dict_storage_find says whether its hash and
  // == are identity's: copy's dispatch tables are keyed by types).
  const bool a_class = args[1]->is(VTKind::Builtin) || (args[1]->is(VTKind::Opaque) && args[1]->value.is(Kind::Foreign));
  if (!is_constant(args[1]) && !a_class) return nullptr;
  const Value key = a_class ? args[1]->value : constant_value(args[1]);
  Value v;
  const output_graph::SourceRef at = output_graph::dict_item_source(args[0]->source, key);
  switch (f->vt->dict_storage_find(f->handle, key, v)) {
    case ForeignAttr::Found:
      if (!contains) return ctx_.builder.wrap(v, at);
      ctx_.builder.present_guard(at, v);
      return const_vt(Value::boolean(true));
    case ForeignAttr::Absent:
      ctx_.builder.absent_guard(at);
      if (contains) return const_vt(Value::boolean(false));
      if (get) return args.size() == 3 ? args[2] : const_vt(Value::none());
      unsupported(BreakReason::python_error, "dict.__getitem__(): KeyError " + repr(key));  // the call raises it
    default: return nullptr;
  }
}

// partial(*args, **kw) of an exact functools.partial the trace pins: its
// func called on its args and keywords, then the call's (Python's own
// order: the call's keywords override the partial's). func, args and
// keywords are read-only members of the partial, read and guarded at its
// source (keywords, a dict, by its contents). Null: no such partial.
VT InstructionTranslator::call_partial(const VT& callee, std::vector<VT>& args, const TupleObj* kwnames) {
  if (!foreign_of(callee) || !callee->source || type_name(callee->value) != "functools.partial") return nullptr;
  VT fn = generic_getattr(callee, "func", /*or_missing=*/true);
  VT bound = generic_getattr(callee, "args", /*or_missing=*/true);
  VT keywords = generic_getattr(callee, "keywords", /*or_missing=*/true);
  if (!fn || !bound || !keywords) return nullptr;
  bound = realize(bound);
  keywords = realize(keywords);
  if (!bound->is(VTKind::Tuple) || !keywords->is(VTKind::ConstDict)) return nullptr;
  const size_t nkw = kwnames ? kwnames->items.size() : 0, npos = args.size() - nkw;
  std::vector<VT> all(bound->items);
  all.insert(all.end(), args.begin(), args.begin() + ptrdiff_t(npos));
  std::vector<Value> names;
  std::vector<VT> values;
  for (size_t i = 0; i < keywords->keys.size(); ++i) {
    if (!keywords->keys[i].is(Kind::Str)) return nullptr;
    vars::dict_set(names, values, keywords->keys[i], keywords->items[i]);
  }
  for (size_t i = 0; i < nkw; ++i) vars::dict_set(names, values, kwnames->items[i], args[npos + i]);
  all.insert(all.end(), values.begin(), values.end());
  const Value merged = make_tuple(std::move(names));  // alive through the call
  return call_function(fn, std::move(all), merged.as<TupleObj>()->items.empty() ? nullptr : merged.as<TupleObj>());
}

// cls(*args) for a Python class whose instances CPython makes without
// running user code before __init__ (ForeignVTable::new_instance): the
// object is made here (MadeHere) and its __init__ inlined on it, as
// type.__call__ would run it; the residual makes the real object from what
// the trace left in it. Null: not such a class (the call breaks).
// Guards: the class by its source; its __new__ and __init__ as the
// lookups found them. Its metaclass's __call__ is read at trace time only
// (as Dynamo does): a metaclass whose __call__ is replaced after compiling
// is not seen.
VT InstructionTranslator::construct_object(const VT& cls, std::vector<VT>& args, const TupleObj* kwnames) {
  VT obj = new_made_object(cls);
  if (!obj) return nullptr;
  // Its __init__: a Python function, or object's, dict's or OrderedDict's
  // own (runtime/semantics/super.h host_init: without arguments, nothing to do).
  Value init;
  if (class_lookup(obj, "__init__", Value::null(), init) != ForeignAttr::Method) return nullptr;
  VT r = call_function(vars::make_user_method(init, obj), std::move(args), kwnames);
  if (!r->is(VTKind::Constant) || !r->value.is_none())
    unsupported(BreakReason::python_error, "__init__() should return None, not " + r->str());
  return obj;
}

// cls.__new__(cls) for a class ForeignVTable::new_instance accepts: an
// object made in this trace, nothing in it yet (MadeHere). Null: not such
// a class. Guards: the class by its source, its __new__ as found.
VT InstructionTranslator::new_made_object(const VT& cls) {
  const auto* f = cls->value.is(Kind::Foreign) ? cls->value.as<ForeignObj>() : nullptr;
  NewInstance made;
  if (!f || !cls->source || !ctx_.python_frames || !f->vt->new_instance || !f->vt->new_instance(f->handle, made))
    return nullptr;
  auto here = std::make_shared<vars::MadeHere>();
  here->pin = output_graph::const_source(made.instance, "new " + type_name(made.instance));
  here->new_fn = made.new_fn;
  here->setitem = made.setitem;
  VT obj = vars::make_made_object(made.instance, cls, std::move(here));
  Value unused;
  class_lookup(obj, "__new__", Value::null(), unused);
  return obj;
}

// object.__new__(cls) (dict.__new__(cls)) called as a function: copy's
// copyreg.__newobj__ runs `cls.__new__(cls)`. An object made in this trace
// when `callee` is the very __new__ the class finds; null otherwise.
VT InstructionTranslator::call_host_new(const VT& callee, std::vector<VT>& args, const TupleObj* kwnames) {
  if (kwnames || args.size() != 1) return nullptr;
  VT cls = realize(args[0]);
  if (!callee->source) return nullptr;
  VT obj = new_made_object(cls);
  if (!obj || object_identity(obj->made->new_fn) != object_identity(callee->value)) return nullptr;
  return obj;
}

// object.__reduce_ex__(obj, protocol) (copy.deepcopy and copy.copy call
// it) on a plain Python object the trace pins or made, as CPython's
// reduce_newobj answers it for a class that keeps object's __reduce__ and
// __getstate__ and has no __getnewargs(_ex)__, no __slots__ and no
// container protocol (a list or dict subclass): (copyreg.__newobj__,
// (cls,), state, None, None), state being the instance __dict__ itself, or
// None when it is empty. Anything else breaks (CPython runs it).
VT InstructionTranslator::reduce_ex(std::vector<VT>& args, const TupleObj* kwnames) {
  if (kwnames || args.size() != 2) return nullptr;
  VT obj = realize(args[0]);
  VT protocol = realize(args[1]);
  auto refuse = [&](const std::string& why) {
    unsupported(BreakReason::untraced_method, "object.__reduce_ex__ of " + obj->str() + " (" + why + ")");
  };
  if (!traced_object(obj)) refuse("an object the trace neither pins nor made");
  if (!is_constant(protocol) || !constant_value(protocol).is(Kind::Int) || constant_value(protocol).as_int() < 2)
    refuse("protocol 0 or 1 reduce through copyreg");
  Value found;
  if (class_lookup(obj, "__reduce__", Value::null(), found) != ForeignAttr::Method || !is_object_method(found, ObjectMethod::Reduce))
    refuse("its class defines __reduce__");
  for (const char* name : {"__getnewargs_ex__", "__getnewargs__", "__slots__", "__len__"})
    if (class_lookup(obj, name, Value::null(), found) != ForeignAttr::Absent) refuse(std::string("its class has ") + name);
  // CPython reads __getstate__ off the object (its class's __getattribute__
  // runs). Before 3.11 object has none, and a miss is the default state.
  if (class_lookup(obj, "__getstate__", Value::null(), found) == ForeignAttr::Absent) {
    if (class_lookup(obj, "__getattr__", Value::null(), found) != ForeignAttr::Absent ||
        generic_getattr(obj, "__getstate__", /*or_missing=*/true))
      refuse("its __getstate__ may be its own");
  } else {
    VT getstate = get_attr(obj, "__getstate__");
    if (!getstate->is(VTKind::UserMethod) || !is_object_method(getstate->value, ObjectMethod::Getstate) || !getstate->self ||
        object_identity(getstate->self->value) != object_identity(obj->value))
      refuse("its __getstate__ is its own");
  }
  VT cls = generic_getattr(obj, "__class__", /*or_missing=*/false);
  VT state = generic_getattr(obj, "__dict__", /*or_missing=*/false);
  if (vars::container_size(*realize(state)) == 0) state = const_vt(Value::none());
  return vars::make_tuple({vars::make_builtin(copyreg_newobj()), vars::make_tuple({cls}), state,
                           const_vt(Value::none()), const_vt(Value::none())});
}

// copyreg.__newobj__(cls): what the traced __reduce_ex__ handed back, which
// copy's _reconstruct calls: cls.__new__(cls), an object made in the trace.
VT InstructionTranslator::copyreg_newobj_call(std::vector<VT>& args, const TupleObj* kwnames) {
  if (kwnames || args.size() != 1) unsupported(BreakReason::untraced_method, "copyreg.__newobj__ with arguments");
  VT cls = realize(args[0]);
  VT obj = new_made_object(cls);
  if (!obj) unsupported(BreakReason::untraced_object, "creating a " + cls->str() + " inside the trace");
  return obj;
}

// super(type, obj) over a Python class (the zero-argument form inside a
// method of it): a tracker that only remembers the two; every lookup
// through it is decided and guarded at the read (host_super_getattr).
VT InstructionTranslator::host_super_of(const VT& type, const VT& obj) {
  if (!traced_object(obj)) unsupported(BreakReason::untraced_object, "super() of " + obj->str());
  Value unused;
  const ForeignObj* f = foreign_of(obj);
  // That `type` is in type(obj).__mro__, checked without running user
  // code (CPython's supercheck reads obj.__class__ when it is not): a
  // lookup of a name no class holds is Undecided only then.
  if (f->vt->lookup_attr(f->handle, "", &type->value, unused, nullptr) == ForeignAttr::Undecided)
    unsupported(BreakReason::untraced_object, "super() over " + type->str() + " of " + obj->str());
  VT vt = vars::make_opaque(builtin_super(ctx_.vm, {type->value, obj->value}), nullptr);  // Python's super(type, obj)
  vt->host_super = true;
  vt->self = obj;
  vt->items = {type};
  return vt;
}

VT InstructionTranslator::host_super_getattr(const VT& sup, const std::string& name) {
  const VT& obj = sup->self;
  const Value& after = sup->items[0]->value;
  if (name == "__thisclass__") return sup->items[0];
  if (name == "__self__") return obj;
  Value attr;
  VT wrapped;
  const ForeignAttr found = class_lookup(obj, name, after, attr, &wrapped);
  if (found == ForeignAttr::Absent) unsupported(BreakReason::attribute_error, "'super' object has no attribute '" + name + "'");
  if (VT v = bind_found(found, attr, wrapped, obj)) return v;
  unsupported(BreakReason::untraced_object, "super()." + name + " over " + obj->str() + " (a descriptor kiln does not trace)");
}

}  // namespace kiln::interpreter
