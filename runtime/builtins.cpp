// The global builtins of every KBC program.
#include "runtime/builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "runtime/descriptors.h"
#include "runtime/exceptions.h"
#include "runtime/module.h"
#include "runtime/format.h"
#include "runtime/ops.h"
#include "runtime/set_ops.h"
#include "runtime/signature.h"
#include "runtime/super.h"
#include "runtime/value_ops.h"

namespace kiln::runtime {

namespace {

// ---- Python builtins ----------------------------------------------------------

Value b_len(CallContext&, const std::vector<Value>& a) { return Value::integer(length(a[0])); }

Value b_range(CallContext&, const std::vector<Value>& a) {
  if (a[1].is_none()) return make_range(0, to_index(a[0], "range() argument"), 1);
  return make_range(to_index(a[0], "range() argument"), to_index(a[1], "range() argument"),
                    to_index(a[2], "range() argument"));
}

struct EnumerateIter final : IteratorObj {
  Value inner;
  int64_t count;
  bool next(Value& out) override {
    Value item;
    if (!inner.as<IteratorObj>()->next(item)) return false;
    out = make_tuple({Value::integer(count++), item});
    return true;
  }
};
Value b_enumerate(CallContext&, const std::vector<Value>& a) {
  auto it = make_ref<EnumerateIter>();
  it->inner = get_iter(a[0]);
  it->count = to_index(a[1], "enumerate() start");
  return Value::object(Kind::Iterator, static_cast<Object*>(it.get()));
}

struct ZipIter final : IteratorObj {
  std::vector<Value> inners;
  bool next(Value& out) override {
    if (inners.empty()) return false;
    std::vector<Value> items(inners.size());
    for (size_t i = 0; i < inners.size(); ++i)
      if (!inners[i].as<IteratorObj>()->next(items[i])) return false;
    out = make_tuple(std::move(items));
    return true;
  }
};
Value b_zip(CallContext&, const std::vector<Value>& a) {
  auto it = make_ref<ZipIter>();
  for (const Value& x : a[0].as<TupleObj>()->items) it->inners.push_back(get_iter(x));
  return Value::object(Kind::Iterator, static_cast<Object*>(it.get()));
}

Value b_print(CallContext& ctx, const std::vector<Value>& a) {
  std::string sep = a[1].is_none() ? " " : to_str(a[1]);
  std::string end = a[2].is_none() ? "\n" : to_str(a[2]);
  std::string out;
  const auto& items = a[0].as<TupleObj>()->items;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + to_str(items[i]);
  ctx.write_stdout(out + end);
  return Value::none();
}

bool isinstance_one(const Value& obj, const Value& type) {
  if (exception_class_kind(type) || (type.is(Kind::Foreign) && type.as<ForeignObj>()->vt->exception_match))
    return exception_isinstance(obj, type);
  if (type.is(Kind::Class))
    return obj.is(Kind::Module) && obj.as<ModuleObj>()->cls->is_subclass_of(type.as<ClassObj>());
  if (type.is(Kind::Builtin)) {
    Kind k = type.as<BuiltinObj>()->type_of;
    if (k == Kind::Null)
      throw_error(ErrorKind::TypeError, "isinstance() arg 2 must be a type or tuple of types");
    if (k == Kind::Int) return obj.is(Kind::Int) || obj.is(Kind::Bool);  // bool is an int
    return obj.kind() == k;
  }
  if (type.is(Kind::Tuple)) {
    for (const Value& t : type.as<TupleObj>()->items)
      if (isinstance_one(obj, t)) return true;
    return false;
  }
  throw_error(ErrorKind::TypeError, "isinstance() arg 2 must be a type or tuple of types, not " + type_name(type));
}
Value b_isinstance(CallContext&, const std::vector<Value>& a) { return Value::boolean(isinstance_one(a[0], a[1])); }

Value min_max(const std::vector<Value>& a, CmpOp better, const char* name) {
  std::vector<Value> items = a[0].as<TupleObj>()->items;
  if (items.size() == 1) items = to_vector(items[0]);
  if (items.empty()) {
    if (!a[1].is_null()) return a[1];
    throw_error(ErrorKind::ValueError, std::string(name) + "() arg is an empty sequence");
  }
  Value best = items[0];
  for (size_t i = 1; i < items.size(); ++i)
    if (truth(compare_op(better, items[i], best))) best = items[i];
  return best;
}
Value b_min(CallContext&, const std::vector<Value>& a) { return min_max(a, CmpOp::LT, "min"); }
Value b_max(CallContext&, const std::vector<Value>& a) { return min_max(a, CmpOp::GT, "max"); }

// abs / sum / pow are both Python builtins and registry ops: tensors go to
// the op, everything else gets Python's meaning.
Value b_abs(CallContext&, const std::vector<Value>& a) {
  const Value& x = a[0];
  if (x.is(Kind::Tensor)) return call_op(OpId::abs, {x});
  if (x.is(Kind::Float)) return Value::floating(std::fabs(x.as_float()));
  if (x.is(Kind::Int) || x.is(Kind::Bool)) {
    if (x.as_int() == INT64_MIN) throw_error(ErrorKind::OverflowError, "integer overflow in abs()");
    return Value::integer(std::llabs(x.as_int()));
  }
  throw_error(ErrorKind::TypeError, "bad operand type for abs(): '" + type_name(x) + "'");
}
Value b_sum(CallContext&, const std::vector<Value>& a) {
  if (a[0].is(Kind::Tensor)) {
    // sum(t, 1), sum(t, dim=1): the tensor op's dim (Python's start slot).
    if (!a[1].is_null() && !a[3].is_null())
      throw_error(ErrorKind::TypeError, "sum() got multiple values for argument 'dim'");
    Value dim = !a[3].is_null() ? a[3] : a[1].is_null() ? Value::none() : a[1];
    Value args[] = {a[0], dim, a[2]};
    static const Value names = make_tuple({intern_value("dim"), intern_value("keepdim")});
    return call_op(OpId::sum, CallArgs{args, 3, names.as<TupleObj>()});
  }
  Value total = a[1].is_null() ? Value::integer(0) : a[1];
  Value it = get_iter(a[0]);
  Value item;
  while (it.as<IteratorObj>()->next(item)) total = binary_op(BinOp::ADD, total, item);
  return total;
}
Value b_pow(CallContext&, const std::vector<Value>& a) { return binary_op(BinOp::POW, a[0], a[1]); }

Value b_getattr(CallContext& ctx, const std::vector<Value>& a) {
  if (!a[1].is(Kind::Str)) throw_error(ErrorKind::TypeError, "getattr(): attribute name must be string");
  auto name = intern(a[1].as_str());
  if (a[2].is_null()) return get_attr(ctx, a[0], name.get());
  Value v = get_attr_or_null(ctx, a[0], name.get());
  return v.is_null() ? a[2] : v;
}
Value b_setattr(CallContext& ctx, const std::vector<Value>& a) {
  if (!a[1].is(Kind::Str)) throw_error(ErrorKind::TypeError, "setattr(): attribute name must be string");
  set_attr(ctx, a[0], intern(a[1].as_str()), a[2]);
  return Value::none();
}
Value b_hasattr(CallContext& ctx, const std::vector<Value>& a) {
  if (!a[1].is(Kind::Str)) throw_error(ErrorKind::TypeError, "hasattr(): attribute name must be string");
  return Value::boolean(!get_attr_or_null(ctx, a[0], intern(a[1].as_str()).get()).is_null());
}

Value parse_int(const std::string& s) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  while (end && *end == ' ') ++end;
  if (s.empty() || *end != '\0' || errno == ERANGE)
    throw_error(ErrorKind::ValueError, "invalid literal for int() with base 10: " + repr(Value::str(s)));
  return Value::integer(v);
}
Value b_int(CallContext&, const std::vector<Value>& a) {
  const Value& x = a[0];
  if (x.is(Kind::Int)) return x;
  if (x.is(Kind::Bool)) return Value::integer(x.as_int());
  if (x.is(Kind::Float)) {
    double d = x.as_float();
    if (!std::isfinite(d)) throw_error(ErrorKind::ValueError, "cannot convert float " + repr(x) + " to integer");
    if (std::fabs(d) >= 9.223372036854775807e18) throw_error(ErrorKind::OverflowError, "int too large for kiln");
    return Value::integer(int64_t(d));
  }
  if (x.is(Kind::Str)) return parse_int(x.as_str());
  if (x.is(Kind::Tensor)) {
    Tensor t = x.as_tensor();
    return Value::integer(int64_t(t.item()));
  }
  throw_error(ErrorKind::TypeError, "int() argument must be a string or a number, not '" + type_name(x) + "'");
}
Value b_float(CallContext&, const std::vector<Value>& a) {
  const Value& x = a[0];
  if (x.is_number()) return Value::floating(x.as_number());
  if (x.is(Kind::Tensor)) return Value::floating(x.as_tensor().item());
  if (x.is(Kind::Str)) {
    const std::string& s = x.as_str();
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0')
      throw_error(ErrorKind::ValueError, "could not convert string to float: " + repr(x));
    return Value::floating(d);
  }
  throw_error(ErrorKind::TypeError, "float() argument must be a string or a number, not '" + type_name(x) + "'");
}
Value b_bool(CallContext&, const std::vector<Value>& a) { return Value::boolean(truth(a[0])); }
Value b_str(CallContext&, const std::vector<Value>& a) { return Value::str(to_str(a[0])); }
Value b_repr(CallContext&, const std::vector<Value>& a) { return Value::str(repr(a[0])); }
Value b_list(CallContext&, const std::vector<Value>& a) {
  return make_list(a[0].is_null() ? std::vector<Value>{} : to_vector(a[0]));
}
Value b_tuple(CallContext&, const std::vector<Value>& a) {
  if (a[0].is(Kind::Tuple)) return a[0];
  return make_tuple(a[0].is_null() ? std::vector<Value>{} : to_vector(a[0]));
}
Value b_set(CallContext&, const std::vector<Value>& a) {
  return a[0].is_null() ? make_set(false) : set_from(a[0], false);
}
Value b_frozenset(CallContext&, const std::vector<Value>& a) {
  if (a[0].is(Kind::FrozenSet)) return a[0];  // immutable: frozenset(fs) is fs, as in CPython
  return a[0].is_null() ? make_set(true) : set_from(a[0], true);
}
Value b_format(CallContext&, const std::vector<Value>& a) {
  if (!a[1].is(Kind::Str))
    throw_error(ErrorKind::TypeError, "format() argument 2 must be str, not " + type_name(a[1]));
  return Value::str(format_value(a[0], a[1].as_str()));
}
Value b_ascii(CallContext&, const std::vector<Value>& a) { return Value::str(ascii_repr(a[0])); }
Value b_dict(CallContext&, const std::vector<Value>& a) {
  Value d = make_dict();
  auto* dict = d.as<DictObj>();
  if (a[0].is(Kind::Dict)) {
    for (const auto& [k, v] : a[0].as<DictObj>()->entries) dict->set(k, v);
  } else if (!a[0].is_null()) {
    for (const Value& pair : to_vector(a[0])) {
      auto kv = to_vector(pair);
      if (kv.size() != 2)
        throw_error(ErrorKind::ValueError, "dictionary update sequence element has length " +
                                               std::to_string(kv.size()) + "; 2 is required");
      dict->set(kv[0], kv[1]);
    }
  }
  for (const auto& [k, v] : a[1].as<DictObj>()->entries) dict->set(k, v);
  return d;
}

Value b_sorted(CallContext&, const std::vector<Value>& a) {
  std::vector<Value> items = to_vector(a[0]);
  std::stable_sort(items.begin(), items.end(),
                   [](const Value& x, const Value& y) { return truth(compare_op(CmpOp::LT, x, y)); });
  if (truth(a[1])) std::reverse(items.begin(), items.end());
  return make_list(std::move(items));
}
Value b_reversed(CallContext&, const std::vector<Value>& a) {
  std::vector<Value> items = to_vector(a[0]);
  std::reverse(items.begin(), items.end());
  return get_iter(make_list(std::move(items)));
}
Value b_any(CallContext&, const std::vector<Value>& a) {
  for (const Value& v : to_vector(a[0]))
    if (truth(v)) return Value::boolean(true);
  return Value::boolean(false);
}
Value b_all(CallContext&, const std::vector<Value>& a) {
  for (const Value& v : to_vector(a[0]))
    if (!truth(v)) return Value::boolean(false);
  return Value::boolean(true);
}
Value b_iter(CallContext&, const std::vector<Value>& a) { return get_iter(a[0]); }
Value b_next(CallContext&, const std::vector<Value>& a) {
  if (!a[0].is(Kind::Iterator)) throw_error(ErrorKind::TypeError, "'" + type_name(a[0]) + "' object is not an iterator");
  Value out;
  if (a[0].as<IteratorObj>()->next(out)) return out;
  if (!a[1].is_null()) return a[1];
  throw_error(ErrorKind::StopIteration, "");
}

// ---- tensors --------------------------------------------------------------------

Value b_parameter(CallContext&, const std::vector<Value>& a) {
  if (!a[0].is(Kind::Tensor)) throw_error(ErrorKind::TypeError, "Parameter() expects a Tensor, got " + type_name(a[0]));
  return Value::tensor(a[0].as_tensor().as_parameter());
}
Value b_manual_seed(CallContext&, const std::vector<Value>& a) {
  manual_seed(uint64_t(to_index(a[0], "manual_seed() seed")));
  return Value::none();
}

// tensor(data, dtype=None): nested lists/tuples of numbers, like torch.tensor.
void flatten_data(const Value& v, size_t depth, Shape& shape, std::vector<Value>& flat) {
  if (v.is(Kind::List) || v.is(Kind::Tuple) || foreign_container(v) == Kind::List) {
    auto items = to_vector(v);
    if (depth == shape.size()) shape.push_back(int64_t(items.size()));
    else if (shape[depth] != int64_t(items.size()))
      throw_error(ErrorKind::ValueError, "tensor(): expected sequence of length " + std::to_string(shape[depth]) +
                                             " at dim " + std::to_string(depth) + " (got " +
                                             std::to_string(items.size()) + ")");
    for (const Value& x : items) flatten_data(x, depth + 1, shape, flat);
    return;
  }
  if (!v.is_number()) throw_error(ErrorKind::TypeError, "tensor(): can't convert '" + type_name(v) + "' to a number");
  if (depth != shape.size())
    throw_error(ErrorKind::ValueError, "tensor(): ragged nested sequence at dim " + std::to_string(depth));
  flat.push_back(v);
}
Value b_tensor(CallContext&, const std::vector<Value>& a) {
  if (a[0].is(Kind::Tensor)) return call_op(OpId::clone, {a[0]});
  Shape shape;
  std::vector<Value> flat;
  flatten_data(a[0], 0, shape, flat);
  DType dt = DType::Bool;
  for (const Value& v : flat)
    dt = promote(dt, v.is(Kind::Float) ? kDefaultFloat : v.is(Kind::Int) ? DType::Int64 : DType::Bool);
  if (flat.empty()) dt = kDefaultFloat;
  if (!a[1].is_none()) {
    if (!a[1].is(Kind::Str) || !dtype_from_name(a[1].as_str()))
      throw_error(ErrorKind::TypeError, "tensor(): unknown dtype " + repr(a[1]));
    dt = *dtype_from_name(a[1].as_str());
  }
  Tensor t = Tensor::empty(shape, dt);
  dispatch_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (size_t i = 0; i < flat.size(); ++i)
      p[i] = flat[i].is(Kind::Float) ? T(flat[i].as_float()) : T(flat[i].as_int());
  });
  return Value::tensor(t);
}

Value b_op(CallContext&, const BuiltinObj& self, const CallArgs& args) { return call_op(OpId(self.op), args); }

struct NativeDef {
  const char* name;
  const char* signature;
  NativeFn fn;
  Kind type_of;
};

NameMap build_builtins() {
  NameMap m;
  // Registry ops first; Python builtins of the same name (abs, sum, pow)
  // replace them below with dispatching versions.
  for (int i = 0; i < kNumOps; ++i) m.set(op_def(OpId(i)).name, op_builtin(i));
  const NativeDef natives[] = {
      {"len", "obj", b_len, Kind::Null},
      {"range", "start, stop=None, step=1", b_range, Kind::Range},
      {"enumerate", "iterable, start=0", b_enumerate, Kind::Null},
      {"zip", "*iterables", b_zip, Kind::Null},
      {"print", "*values, sep=None, end=None", b_print, Kind::Null},
      {"isinstance", "obj, classinfo", b_isinstance, Kind::Null},
      {"min", "*args, default=?", b_min, Kind::Null},
      {"max", "*args, default=?", b_max, Kind::Null},
      {"abs", "x", b_abs, Kind::Null},
      {"sum", "iterable, start=?, keepdim=False, dim=?", b_sum, Kind::Null},
      {"pow", "base, exp", b_pow, Kind::Null},
      {"getattr", "obj, name, default=?", b_getattr, Kind::Null},
      {"setattr", "obj, name, value", b_setattr, Kind::Null},
      {"hasattr", "obj, name", b_hasattr, Kind::Null},
      {"delattr", "obj, name, /", builtin_delattr, Kind::Null},  // runtime/descriptors.h
      {"super", "type=?, obj=?, /", builtin_super, Kind::Super},  // runtime/super.h
      {"int", "x=0", b_int, Kind::Int},
      {"float", "x=0.0", b_float, Kind::Float},
      {"bool", "x=False", b_bool, Kind::Bool},
      {"str", "x=''", b_str, Kind::Str},
      {"repr", "obj", b_repr, Kind::Null},
      {"list", "iterable=?", b_list, Kind::List},
      {"tuple", "iterable=?", b_tuple, Kind::Tuple},
      {"dict", "iterable=?, **kwargs", b_dict, Kind::Dict},
      {"set", "iterable=?, /", b_set, Kind::Set},
      {"frozenset", "iterable=?, /", b_frozenset, Kind::FrozenSet},
      {"format", "value, format_spec='', /", b_format, Kind::Null},
      {"ascii", "obj, /", b_ascii, Kind::Null},
      {"sorted", "iterable, *, reverse=False", b_sorted, Kind::Null},
      {"reversed", "seq", b_reversed, Kind::Null},
      {"any", "iterable", b_any, Kind::Null},
      {"all", "iterable", b_all, Kind::Null},
      {"iter", "obj", b_iter, Kind::Null},
      {"next", "iterator, default=?", b_next, Kind::Null},
      {"Parameter", "data", b_parameter, Kind::Null},
      {"manual_seed", "seed", b_manual_seed, Kind::Null},
      {"tensor", "data, dtype=None", b_tensor, Kind::Tensor},
  };
  for (const NativeDef& d : natives) {
    Value b = make_native(d.name, d.signature, d.fn);
    b.as<BuiltinObj>()->type_of = d.type_of;
    m.set(d.name, b);
  }
  m.set("Tensor", *m.find("tensor"));  // isinstance(x, Tensor)
  // Every built-in exception class a user can name (runtime/exceptions.h).
  for (int k = 0; k <= int(ErrorKind::VerifyError); ++k)
    if (ErrorKind(k) != ErrorKind::VerifyError) m.set(error_kind_name(ErrorKind(k)), exception_class(ErrorKind(k)));
  for (DType d : {DType::Float32, DType::Float64, DType::Int64}) m.set(dtype_name(d), intern_value(dtype_name(d)));
  m.set("Module", Value::object(Kind::Class, module_base_class()));
#define KILN_BM_GLOBAL(name) \
  m.set(#name, Value::object(Kind::Class, builtin_module_class(BuiltinModule::name)));
  KILN_BUILTIN_MODULES(KILN_BM_GLOBAL)
#undef KILN_BM_GLOBAL
  return m;
}

}  // namespace

Value assertion_error() {
  static const Value v = *builtins().find("AssertionError");
  return v;
}

Value op_builtin(int op_id) {
  static const std::vector<Value> table = [] {
    std::vector<Value> t;
    for (int i = 0; i < kNumOps; ++i) {
      Value b = make_builtin(op_def(OpId(i)).name, b_op);
      b.as<BuiltinObj>()->op = i;
      t.push_back(b);
    }
    return t;
  }();
  return table[size_t(op_id)];
}

const NameMap& builtins() {
  static const NameMap* m = new NameMap(build_builtins());
  return *m;
}

}  // namespace kiln::runtime
