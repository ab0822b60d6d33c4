// Attribute, subscript and iteration access on Values (Python semantics).
#include <algorithm>

#include "runtime/base/budget.h"
#include "runtime/semantics/builtins.h"
#include "runtime/semantics/class_model.h"
#include "runtime/semantics/descriptors.h"
#include "runtime/semantics/exceptions.h"
#include "runtime/semantics/kind_slots.h"
#include "runtime/semantics/set_ops.h"
#include "runtime/semantics/super.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::runtime {

// ---------------------------------------------------------------- iterators --
namespace {

struct SeqIter final : IteratorObj {
  Value seq;  // a list (read live, as Python does) or a tuple; null once exhausted
  size_t pos = 0;
  bool next(Value& out) override {
    if (seq.is_null()) return false;  // as CPython's: items appended later are not seen
    const auto& items = seq.is(Kind::List) ? seq.as<ListObj>()->items : seq.as<TupleObj>()->items;
    if (pos >= items.size()) {
      seq = Value::null();
      return false;
    }
    out = items[pos++];
    return true;
  }
  void traverse(Visitor& v) const override { visit(v, seq); }
  void clear() override { seq = Value::null(); }
};

struct VectorIter final : IteratorObj {  // a snapshot (dict keys, module children)
  std::vector<Value> items;
  size_t pos = 0;
  bool next(Value& out) override {
    if (pos >= items.size()) return false;
    out = items[pos++];
    return true;
  }
  void traverse(Visitor& v) const override { visit(v, items); }
  void clear() override {
    std::vector<Value> old;
    old.swap(items);
    pos = 0;
  }
};

struct DictIter final : IteratorObj {
  Ref<DictObj> dict;
  size_t pos = 0, size0 = 0;
  bool next(Value& out) override {
    if (dict->entries.size() != size0)
      throw_error(ErrorKind::RuntimeError, "dictionary changed size during iteration");
    if (pos >= dict->entries.size()) return false;
    out = dict->entries[pos++].first;
    return true;
  }
  void traverse(Visitor& v) const override { visit(v, dict); }
};

struct RangeIter final : IteratorObj {
  int64_t cur, step, remaining;
  bool next(Value& out) override {
    if (remaining <= 0) return false;
    out = Value::integer(cur);
    cur += step;
    --remaining;
    return true;
  }
  void traverse(Visitor&) const override {}
};

struct TensorIter final : IteratorObj {
  Tensor t;
  int64_t pos = 0;
  bool next(Value& out) override {
    if (pos >= t.size(0)) return false;
    static const int select_op = tensor_op_id("select");
    out = call_tensor_op(select_op, {Value::tensor(t), Value::integer(0), Value::integer(pos++)});
    return true;
  }
  void traverse(Visitor& v) const override {
    if (t.defined()) v(t.impl());
  }
};

// The bytes of the UTF-8 character starting at s[i] (its lead byte says).
size_t utf8_width(const std::string& s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  const size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  return std::min(n, s.size() - i);
}

std::vector<Value> utf8_chars(const std::string& s) {
  std::vector<Value> out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_width(s, i);
    out.push_back(Value::str(s.substr(i, n)));
    i += n;
  }
  return out;
}

size_t utf8_length(const std::string& s) {
  size_t count = 0;
  for (size_t i = 0; i < s.size(); i += utf8_width(s, i)) ++count;
  return count;
}

// A str's characters one at a time, as CPython's iterator: iterating a
// long string does not make a str object per character up front.
struct StrIter final : IteratorObj {
  Value str;  // null once exhausted
  size_t pos = 0;
  bool next(Value& out) override {
    if (str.is_null()) return false;
    const std::string& s = str.as_str();
    if (pos >= s.size()) {
      str = Value::null();
      return false;
    }
    const size_t n = utf8_width(s, pos);
    out = Value::str(std::string_view(s).substr(pos, n));
    pos += n;
    return true;
  }
  void traverse(Visitor& v) const override { visit(v, str); }
  void clear() override { str = Value::null(); }
};

template <class It>
Value wrap_iter(Ref<It> it) {
  return Value::object(Kind::Iterator, static_cast<Object*>(it.get()));
}

// The foreign object's container hook, or a TypeError in Python's words.
template <class Hook>
Hook foreign_hook(const Value& v, Hook ForeignVTable::*hook, const std::string& python_error) {
  auto* f = v.as<ForeignObj>();
  if (Hook h = f->vt->*hook) return h;
  throw_error(ErrorKind::TypeError, python_error);
}

}  // namespace

Value get_iter(const Value& v) {
  switch (v.kind()) {
    case Kind::List:
    case Kind::Tuple: {
      auto it = make_ref<SeqIter>();
      it->seq = v;
      return wrap_iter(it);
    }
    case Kind::Str: {
      auto it = make_ref<StrIter>();
      it->str = v;
      return wrap_iter(it);
    }
    case Kind::Dict: {
      auto it = make_ref<DictIter>();
      it->dict = Ref<DictObj>(v.as<DictObj>());
      it->size0 = it->dict->entries.size();
      return wrap_iter(it);
    }
    case Kind::Range: {
      auto* r = v.as<RangeObj>();
      auto it = make_ref<RangeIter>();
      it->cur = r->start;
      it->step = r->step;
      it->remaining = r->length();
      return wrap_iter(it);
    }
    case Kind::Set:
    case Kind::FrozenSet: return set_iter(v);
    case Kind::Iterator: return v;
    case Kind::Tensor: {
      Tensor t = v.as_tensor();
      if (t.dim() == 0) throw_error(ErrorKind::TypeError, "iteration over a 0-d tensor");
      auto it = make_ref<TensorIter>();
      it->t = t;
      return wrap_iter(it);
    }
    case Kind::Module: {
      auto it = make_ref<VectorIter>();
      it->items = module_slots().iter_items(v);
      return wrap_iter(it);
    }
    case Kind::Foreign:
      return foreign_hook(v, &ForeignVTable::iter, "'" + type_name(v) + "' object is not iterable")(
          v.as<ForeignObj>()->handle);
    default: throw_error(ErrorKind::TypeError, "'" + type_name(v) + "' object is not iterable");
  }
}

std::vector<Value> to_vector(const Value& iterable) {
  if (iterable.is(Kind::List)) return iterable.as<ListObj>()->items;
  if (iterable.is(Kind::Tuple)) return iterable.as<TupleObj>()->items;
  std::vector<Value> out;
  Value it = get_iter(iterable);
  Value item;
  while (it.as<IteratorObj>()->next(item)) {
    if (out.size() == out.capacity()) check_allocation(2 * (out.size() + 1) * sizeof(Value), "a sequence");
    out.push_back(item);
  }
  return out;
}

Kind foreign_container(const Value& v) {
  if (!v.is(Kind::Foreign)) return Kind::Null;
  auto* f = v.as<ForeignObj>();
  return f->vt->container ? f->vt->container(f->handle) : Kind::Null;
}

const void* object_identity(const Value& v) {
  return v.is(Kind::Foreign) ? v.as<ForeignObj>()->handle : static_cast<const void*>(v.obj());
}

Value native_container(const Value& v) {
  switch (foreign_container(v)) {
    case Kind::List: return make_list(to_vector(v));
    case Kind::Dict: {
      Value d = make_dict();
      for (const Value& k : to_vector(v)) d.as<DictObj>()->set(k, get_item(v, k));
      return d;
    }
    case Kind::Set: {
      // With the same table as the Python set, when the seam can read it:
      // iteration order and every later operation depend on it.
      if (Value exact = exact_set_snapshot(v); !exact.is_null()) return exact;
      Value s = make_set();
      for (const Value& x : to_vector(v)) s.as<SetObj>()->add(x);
      return s;
    }
    default: return v;
  }
}

Value exact_set_snapshot(const Value& v) {
  if (foreign_container(v) != Kind::Set) return Value::null();
  auto* f = v.as<ForeignObj>();
  return f->vt->set_snapshot ? f->vt->set_snapshot(f->handle) : Value::null();
}

Value native_sequences(const Value& v) {
  const bool foreign_list = foreign_container(v) == Kind::List;
  if (!foreign_list && !v.is(Kind::List) && !v.is(Kind::Tuple)) return v;
  std::vector<Value> items = to_vector(v);
  bool changed = foreign_list;
  for (Value& x : items) {
    Value n = native_sequences(x);
    changed = changed || !n.is_same(x);
    x = std::move(n);
  }
  if (!changed) return v;
  return v.is(Kind::Tuple) ? make_tuple(std::move(items)) : make_list(std::move(items));
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Kind::Str: return int64_t(utf8_length(v.as_str()));
    case Kind::List: return int64_t(v.as<ListObj>()->items.size());
    case Kind::Tuple: return int64_t(v.as<TupleObj>()->items.size());
    case Kind::Dict: return int64_t(v.as<DictObj>()->entries.size());
    case Kind::Set:
    case Kind::FrozenSet: return v.as<SetObj>()->size();
    case Kind::Range: return v.as<RangeObj>()->length();
    case Kind::Tensor: {
      Tensor t = v.as_tensor();
      if (t.dim() == 0) throw_error(ErrorKind::TypeError, "len() of a 0-d tensor");
      return t.size(0);
    }
    case Kind::Module: return module_slots().len(v);
    case Kind::Foreign:
      return foreign_hook(v, &ForeignVTable::length, "object of type '" + type_name(v) + "' has no len()")(
          v.as<ForeignObj>()->handle);
    default: throw_error(ErrorKind::TypeError, "object of type '" + type_name(v) + "' has no len()");
  }
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::Str:
      if (!item.is(Kind::Str))
        throw_error(ErrorKind::TypeError, "'in <string>' requires string as left operand, not " + type_name(item));
      return container.as_str().find(item.as_str()) != std::string::npos;
    case Kind::List:
    case Kind::Tuple: {
      const auto& items =
          container.is(Kind::List) ? container.as<ListObj>()->items : container.as<TupleObj>()->items;
      for (const auto& x : items)
        if (x.is_same(item) || values_equal(x, item)) return true;
      return false;
    }
    case Kind::Dict: return container.as<DictObj>()->find(item) != nullptr;
    case Kind::Set:
    case Kind::FrozenSet: return set_contains(container, item);  // TypeError if unhashable
    case Kind::Range: {
      if (!item.is(Kind::Int) && !item.is(Kind::Bool)) return false;
      auto* r = container.as<RangeObj>();
      int64_t x = item.as_int();
      if (r->step > 0 ? (x < r->start || x >= r->stop) : (x > r->start || x <= r->stop)) return false;
      return (x - r->start) % r->step == 0;
    }
    case Kind::Foreign:
      return foreign_hook(container, &ForeignVTable::contains,
                          "argument of type '" + type_name(container) + "' is not iterable")(
          container.as<ForeignObj>()->handle, item);
    case Kind::Module:
      if (container.as<ModuleObj>()->cls->builtin_kind() == BuiltinModule::ModuleDict)
        return item.is(Kind::Str) && container.as<ModuleObj>()->modules.find(item.as_str()) != nullptr;
      [[fallthrough]];
    default:
      throw_error(ErrorKind::TypeError, "argument of type '" + type_name(container) + "' is not iterable");
  }
}

// ---------------------------------------------------------------- indexing --

int64_t to_index(const Value& v, const char* what) {
  if (v.is(Kind::Int) || v.is(Kind::Bool)) return v.as_int();
  if (const BigIntHooks* h = bigint_hooks(); h && v.is(Kind::Foreign) && h->is_big(v)) {
    // A Python int past int64: slice bounds clamp (PySlice_Unpack; 2**62
    // clamps every position a kiln sequence can have and leaves room for
    // `x + n`); everything else is CPython's Py_ssize_t conversion error.
    if (std::string_view(what).rfind("slice", 0) == 0)
      return truth(compare_op(CmpOp::LT, v, Value::integer(0))) ? -(int64_t(1) << 62) : int64_t(1) << 62;
    throw_error(ErrorKind::OverflowError, "Python int too large to convert to C ssize_t");
  }
  throw_error(ErrorKind::TypeError, std::string(what) + " must be an integer, not " + type_name(v));
}

Value make_slice(Value start, Value stop, Value step) {
  auto s = make_ref<SliceObj>();
  s->start = std::move(start);
  s->stop = std::move(stop);
  s->step = std::move(step);
  return Value::object(Kind::Slice, s);
}

// Python's slice.indices(): clamps to [0, n] and returns the picked positions.
static std::vector<int64_t> slice_positions(const SliceObj* s, int64_t n) {
  int64_t step = s->step.is_none() ? 1 : to_index(s->step, "slice step");
  if (step == 0) throw_error(ErrorKind::ValueError, "slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (v.is_none()) return dflt;
    int64_t x = to_index(v, "slice indices");
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  int64_t start = clamp(s->start, step > 0 ? 0 : n - 1);
  int64_t stop = clamp(s->stop, step > 0 ? n : -1);
  std::vector<int64_t> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(i);
  return out;
}

int64_t as_index(const Value& v) {
  if (v.is(Kind::Int) || v.is(Kind::Bool)) return v.as_int();
  throw_error(ErrorKind::TypeError, "'" + type_name(v) + "' object cannot be interpreted as an integer");
}

static size_t seq_index(const Value& key, size_t n, const char* what) {
  if (const BigIntHooks* h = bigint_hooks(); h && key.is(Kind::Foreign) && h->is_big(key))
    throw_error(ErrorKind::IndexError, "cannot fit 'int' into an index-sized integer");
  if (!key.is(Kind::Int) && !key.is(Kind::Bool)) {  // CPython's words per type
    const std::string_view w(what);
    if (w == "string") throw_error(ErrorKind::TypeError, "string indices must be integers, not '" + type_name(key) + "'");
    throw_error(ErrorKind::TypeError, std::string(w == "list assignment" ? "list" : what) +
                                          " indices must be integers or slices, not " + type_name(key));
  }
  int64_t i = key.as_int();
  if (i < 0) i += int64_t(n);
  if (i < 0 || i >= int64_t(n)) throw_error(ErrorKind::IndexError, std::string(what) + " index out of range");
  return size_t(i);
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Kind::List:
    case Kind::Tuple: {
      const auto& items = obj.is(Kind::List) ? obj.as<ListObj>()->items : obj.as<TupleObj>()->items;
      const char* what = obj.is(Kind::List) ? "list" : "tuple";
      if (key.is(Kind::Slice)) {
        std::vector<Value> out;
        for (int64_t i : slice_positions(key.as<SliceObj>(), int64_t(items.size()))) out.push_back(items[size_t(i)]);
        return obj.is(Kind::List) ? make_list(std::move(out)) : make_tuple(std::move(out));
      }
      return items[seq_index(key, items.size(), what)];
    }
    case Kind::Str: {
      auto chars = utf8_chars(obj.as_str());
      if (key.is(Kind::Slice)) {
        std::string out;
        for (int64_t i : slice_positions(key.as<SliceObj>(), int64_t(chars.size())))
          out += chars[size_t(i)].as_str();
        return Value::str(out);
      }
      return chars[seq_index(key, chars.size(), "string")];
    }
    case Kind::Dict: {
      const Value* v = obj.as<DictObj>()->find(key);
      if (!v) throw_key_error(key);
      return *v;
    }
    case Kind::Range: {
      auto* r = obj.as<RangeObj>();
      size_t i = seq_index(key, size_t(r->length()), "range object");
      return Value::integer(r->start + int64_t(i) * r->step);
    }
    case Kind::Tensor: return tensor_slots().getitem(obj.as_tensor(), key);
    case Kind::Module: return module_slots().getitem(obj, key);
    case Kind::Foreign:
      return foreign_hook(obj, &ForeignVTable::getitem, "'" + type_name(obj) + "' object is not subscriptable")(
          obj.as<ForeignObj>()->handle, key);
    default: throw_error(ErrorKind::TypeError, "'" + type_name(obj) + "' object is not subscriptable");
  }
}

void set_item(const Value& obj, const Value& key, const Value& value) {
  switch (obj.kind()) {
    case Kind::List: {
      auto& items = obj.as<ListObj>()->items;
      if (key.is(Kind::Slice)) {
        auto pos = slice_positions(key.as<SliceObj>(), int64_t(items.size()));
        std::vector<Value> vals = to_vector(value);
        const Value& step = key.as<SliceObj>()->step;
        if (step.is_none() || (step.is(Kind::Int) && step.as_int() == 1)) {
          // Contiguous slice assignment may change the length.
          // An empty slice inserts at its start, adjusted as Python does
          // (a[-2:-2] = x inserts two from the end).
          const int64_t n = int64_t(items.size());
          int64_t lo = 0;
          if (!pos.empty()) {
            lo = pos.front();
          } else if (!key.as<SliceObj>()->start.is_none()) {
            lo = to_index(key.as<SliceObj>()->start, "slice indices");
            lo = lo < 0 ? std::max<int64_t>(lo + n, 0) : std::min(lo, n);
          }
          items.erase(items.begin() + lo, items.begin() + lo + int64_t(pos.size()));
          items.insert(items.begin() + lo, vals.begin(), vals.end());
          return;
        }
        if (vals.size() != pos.size())
          throw_error(ErrorKind::ValueError, "attempt to assign sequence of size " + std::to_string(vals.size()) +
                                                 " to extended slice of size " + std::to_string(pos.size()));
        for (size_t i = 0; i < pos.size(); ++i) items[size_t(pos[i])] = vals[i];
        return;
      }
      items[seq_index(key, items.size(), "list assignment")] = value;
      return;
    }
    case Kind::Dict: obj.as<DictObj>()->set(key, value); return;
    case Kind::Tensor: tensor_slots().setitem(obj.as_tensor(), key, value); return;
    case Kind::Foreign:
      foreign_hook(obj, &ForeignVTable::setitem,
                   "'" + type_name(obj) + "' object does not support item assignment")(obj.as<ForeignObj>()->handle,
                                                                                         key, value);
      return;
    default:
      throw_error(ErrorKind::TypeError, "'" + type_name(obj) + "' object does not support item assignment");
  }
}

void del_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Kind::List: {
      auto& items = obj.as<ListObj>()->items;
      if (key.is(Kind::Slice)) {
        auto pos = slice_positions(key.as<SliceObj>(), int64_t(items.size()));
        std::sort(pos.rbegin(), pos.rend());
        for (int64_t i : pos) items.erase(items.begin() + i);
        return;
      }
      items.erase(items.begin() + ptrdiff_t(seq_index(key, items.size(), "list assignment")));
      return;
    }
    case Kind::Dict:
      if (!obj.as<DictObj>()->erase(key)) throw_key_error(key);
      return;
    case Kind::Foreign:
      foreign_hook(obj, &ForeignVTable::setitem,
                   "'" + type_name(obj) + "' object does not support item deletion")(obj.as<ForeignObj>()->handle,
                                                                                       key, Value::null());
      return;
    default: throw_error(ErrorKind::TypeError, "'" + type_name(obj) + "' object does not support item deletion");
  }
}

// --------------------------------------------------------------- attributes --

static Value bind(const Value& func, const Value& self) {
  auto bm = make_ref<BoundMethodObj>();
  bm->func = func;
  bm->self = self;
  return Value::object(Kind::BoundMethod, bm);
}

// Attributes that are data, not methods: tensor.shape etc.
static Value tensor_attr(const Tensor& t, const std::string& n) {
  if (n == "shape") {
    std::vector<Value> dims;
    for (int64_t s : t.sizes()) dims.push_back(Value::integer(s));
    return make_tuple(std::move(dims));
  }
  if (n == "dtype") return intern_value(dtype_name(t.dtype()));
  if (n == "ndim") return Value::integer(t.dim());
  // kiln tensors live on the CPU and have no autograd; Python's t.device is
  // a kiln.device, a str subclass equal to this.
  if (n == "device") return intern_value("cpu");
  if (n == "requires_grad" || n == "is_cuda") return Value::boolean(false);
  if (n == "T") {
    std::vector<Value> dims;
    for (int64_t d = t.dim() - 1; d >= 0; --d) dims.push_back(Value::integer(d));
    static const int permute_op = tensor_op_id("permute");
    return call_tensor_op(permute_op, {Value::tensor(t), make_tuple(std::move(dims))});
  }
  return Value::null();
}

// Native method (registry op or type method) for a builtin-typed value.
static Value native_method(const Value& obj, const StrObj* name) {
  if (obj.is(Kind::Tensor)) {
    if (Value m = host_tensor_method(name); !m.is_null()) return m;
    if (Value m = tensor_slots().method(name); !m.is_null()) return m;
  }
  return type_method(obj.kind(), name);
}

Value get_attr_or_null(CallContext& ctx, const Value& obj, const StrObj* name) {
  switch (obj.kind()) {
    case Kind::Module: {
      Value v = module_lookup(obj, name);
      if (!v.is_null() && !v.is(Kind::Property)) return v;
      // A property's getter, a __getattr__, or nothing: module_getattr says.
      try {
        return module_getattr(ctx, obj, name);
      } catch (const Error& e) {
        if (e.kind() == ErrorKind::AttributeError) return Value::null();
        throw;
      }
    }
    case Kind::Tensor: {
      Value v = tensor_attr(obj.as_tensor(), name->s);
      if (!v.is_null()) return v;
      break;
    }
    case Kind::Class: return class_getattr_or_null(obj, name);
    case Kind::Super: return super_getattr_or_null(ctx, obj, name);
    case Kind::StaticMethod:
    case Kind::ClassMethod:
      if (name->s == "__func__" || name->s == "__wrapped__") return obj.as<MethodWrapperObj>()->func;
      return Value::null();
    case Kind::Property: {
      const auto* p = obj.as<PropertyObj>();
      auto none_if_null = [](const Value& v) { return v.is_null() ? Value::none() : v; };
      if (name->s == "fget") return none_if_null(p->fget);
      if (name->s == "fset") return none_if_null(p->fset);
      if (name->s == "fdel") return none_if_null(p->fdel);
      return Value::null();
    }
    case Kind::Function:
      if (name->s == "__name__") return Value::str(obj.as<FunctionObj>()->code->name);
      if (name->s == "__qualname__") return Value::str(obj.as<FunctionObj>()->code->qualname);
      return Value::null();
    case Kind::Builtin: {
      if (name->s == "__name__") return Value::str(obj.as<BuiltinObj>()->name);
      // A type's method, unbound (str.upper, list.append): the method
      // builtin itself, which takes self first.
      const Kind type_of = obj.as<BuiltinObj>()->type_of;
      if (type_of == Kind::Null) return Value::null();
      if (Value cm = type_classmethod(type_of, name); !cm.is_null()) return cm;
      return type_method(type_of, name);
      return Value::null();
    }
    case Kind::BoundMethod:
      if (name->s == "__self__") return obj.as<BoundMethodObj>()->self;
      if (name->s == "__func__") return obj.as<BoundMethodObj>()->func;
      return Value::null();
    case Kind::Slice: {
      auto* s = obj.as<SliceObj>();
      if (name->s == "start") return s->start;
      if (name->s == "stop") return s->stop;
      if (name->s == "step") return s->step;
      return Value::null();
    }
    case Kind::Range: {
      auto* r = obj.as<RangeObj>();
      if (name->s == "start") return Value::integer(r->start);
      if (name->s == "stop") return Value::integer(r->stop);
      if (name->s == "step") return Value::integer(r->step);
      return Value::null();
    }
    case Kind::Foreign: {
      auto* f = obj.as<ForeignObj>();
      if (!f->vt->getattr) return Value::null();
      try {
        return f->vt->getattr(f->handle, name->s);
      } catch (const Error& e) {
        if (e.kind() == ErrorKind::AttributeError) return Value::null();
        throw;
      }
    }
    default: break;
  }
  Value m = native_method(obj, name);
  return m.is_null() ? m : bind(m, obj);
}

Value get_attr(CallContext& ctx, const Value& obj, const StrObj* name) {
  if (obj.is(Kind::Module)) return module_getattr(ctx, obj, name);
  if (obj.is(Kind::Foreign)) {
    auto* f = obj.as<ForeignObj>();
    if (f->vt->getattr) return f->vt->getattr(f->handle, name->s);
  }
  Value v = get_attr_or_null(ctx, obj, name);
  if (v.is_null()) {
    if (obj.is(Kind::Super)) super_attribute_error(name);
    if (obj.is(Kind::Class))
      throw_error(ErrorKind::AttributeError, "type object '" + obj.as<ClassObj>()->name +
                                                 "' has no attribute '" + name->s + "'");
    throw_error(ErrorKind::AttributeError, "'" + type_name(obj) + "' object has no attribute '" + name->s + "'");
  }
  return v;
}

void load_method(CallContext& ctx, const Value& obj, const StrObj* name, Value& method, Value& self) {
  if (obj.is(Kind::Module)) {
    // A class function not shadowed by an instance entry is called with
    // self prepended, no bound-method object made.
    auto* m = obj.as<ModuleObj>();
    if (!m->params.contains(name) && !m->modules.contains(name) && !m->buffers.contains(name) &&
        !m->attrs.contains(name)) {
      if (const Value* f = m->cls->lookup(name); f && (f->is(Kind::Function) || f->is(Kind::Builtin))) {
        method = *f;
        self = obj;
        return;
      }
    }
  } else if (!obj.is(Kind::Foreign) && !obj.is(Kind::Class)) {
    if (!obj.is(Kind::Tensor) || tensor_attr(obj.as_tensor(), name->s).is_null()) {
      Value m = native_method(obj, name);
      if (!m.is_null()) {
        method = std::move(m);
        self = obj;
        return;
      }
    }
  }
  method = get_attr(ctx, obj, name);
  self = Value::null();
}

void set_attr(CallContext& ctx, const Value& obj, const Ref<StrObj>& name, const Value& value) {
  if (obj.is(Kind::Module)) return module_setattr(obj, name, value, &ctx);
  set_attr(obj, name, value);
}

void del_attr(CallContext& ctx, const Value& obj, const StrObj* name) {
  switch (obj.kind()) {
    case Kind::Module: module_delattr(obj, name, &ctx); return;
    case Kind::Foreign: {
      auto* f = obj.as<ForeignObj>();
      if (f->vt->setattr) {
        f->vt->setattr(f->handle, name->s, Value::null());  // Null: delete (the seam's convention)
        return;
      }
      break;
    }
    default: break;
  }
  if (obj.is(Kind::Class)) return class_delattr(obj.as<ClassObj>(), name);
  // Nothing else kiln has holds attributes a program can delete.
  if (get_attr_or_null(ctx, obj, name).is_null())
    throw_error(ErrorKind::AttributeError, "'" + type_name(obj) + "' object has no attribute '" + name->s + "'");
  throw_error(ErrorKind::AttributeError,
              "'" + type_name(obj) + "' object attribute '" + name->s + "' is read-only");
}

void set_attr(const Value& obj, const Ref<StrObj>& name, const Value& value) {
  switch (obj.kind()) {
    case Kind::Module: module_setattr(obj, name, value); return;
    case Kind::Class: class_setattr(obj.as<ClassObj>(), name, value); return;
    case Kind::Foreign: {
      auto* f = obj.as<ForeignObj>();
      if (f->vt->setattr) {
        f->vt->setattr(f->handle, name->s, value);
        return;
      }
      break;
    }
    default: break;
  }
  throw_error(ErrorKind::AttributeError,
              "'" + type_name(obj) + "' object attribute '" + name->s + "' cannot be set");
}

}  // namespace kiln::runtime
