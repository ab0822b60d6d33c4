// The registry table built from ops.def, argument binding (Python's rules
// for positional, keyword and `*varargs` parameters) and the typed getters
// of OpArgs.
#include <unordered_map>

#include "runtime/tensor/ops.h"

#include "runtime/semantics/value_ops.h"
#include "runtime/tensor/ops_kernels.h"

namespace kiln::runtime {
namespace {

// Pointwise rows all name the one `pointwise_eager` template; every other
// row names its own function.
#define KILN_EAGER_PTR_Pointwise(NAME, EAGER) &pointwise_eager<OpId::NAME>
#define KILN_EAGER_PTR_Reduction(NAME, EAGER) &EAGER
#define KILN_EAGER_PTR_Matmul(NAME, EAGER) &EAGER
#define KILN_EAGER_PTR_View(NAME, EAGER) &EAGER
#define KILN_EAGER_PTR_Other(NAME, EAGER) &EAGER

struct Registry {
  std::vector<OpDef> defs;
  std::unordered_map<std::string_view, const OpDef*> by_name;

  Registry() {
    defs.reserve(kNumOps);
#define KILN_OP(NAME, TORCH, ARITY, KIND, SIGNATURE, SHAPE, EAGER, RULE, EXPR)                                \
  defs.push_back(OpDef{OpId::NAME, #NAME, TorchFunction::TORCH, ARITY, OpKind::KIND, SIGNATURE, PwRule::RULE, \
                       &SHAPE, KILN_EAGER_PTR_##KIND(NAME, EAGER), Signature(#NAME, SIGNATURE, true)});
#include "runtime/tensor/ops.def"
#undef KILN_OP
#define KILN_OP(...)
#define KILN_DECOMPOSE(NAME, FN) defs[size_t(OpId::NAME)].decompose = &FN;
#define KILN_MUTATES(NAME) defs[size_t(OpId::NAME)].mutates = true;
#include "runtime/tensor/ops.def"
#undef KILN_OP
#undef KILN_DECOMPOSE
#undef KILN_MUTATES
    for (const OpDef& d : defs) by_name.emplace(d.name, &d);
  }
};

// Built on first use (thread-safe static), so no static-initialisation order
// issue with other translation units.
const Registry& registry() {
  static const Registry r;
  return r;
}

[[noreturn]] void arg_type_error(const OpArgs& a, size_t i, const char* expected) {
  throw_error(ErrorKind::TypeError, std::string(a.op->name) + "(): argument '" + a.param_name(i) +
                                        "' must be " + expected + ", not " + kind_name(a.v[i].kind()));
}

// ops.def's TORCH column where C++ can check it: a leading underscore is an
// op of kiln's own, which torch has no function for.
#define KILN_OP(NAME, TORCH, ...)                                                  \
  static_assert(#NAME[0] != '_' || TorchFunction::TORCH == TorchFunction::NoTorch, \
                "ops.def: " #NAME " is kiln's own op: its TORCH column is NoTorch");
#include "runtime/tensor/ops.def"
#undef KILN_OP

}  // namespace

const OpDef& op_def(OpId id) { return registry().defs[size_t(id)]; }

const OpDef* find_op(std::string_view name) {
  const auto& m = registry().by_name;
  auto it = m.find(name);
  return it == m.end() ? nullptr : it->second;
}

OpArgs bind_op_args(const OpDef& op, const CallArgs& args) {
  OpArgs out;
  out.op = &op;
  // A caller's own Python list (a Foreign value) is read into a native one:
  // ops only read their arguments, and their readers know native sequences.
  bool foreign = false;
  for (size_t i = 0; i < args.nargs; ++i) foreign = foreign || args[i].is(Kind::Foreign);
  if (!foreign) {
    out.v = op.sig.bind(args);
    return out;
  }
  std::vector<Value> native(args.args, args.args + args.nargs);
  for (Value& x : native) x = native_sequences(x);
  out.v = op.sig.bind(CallArgs{native.data(), native.size(), args.kwnames});
  return out;
}

namespace {

// Each part of a composite runs its kernel.
struct EagerEmitter final : OpEmitter {
  Value call(OpId op, const CallArgs& args) override { return call_op(op, args); }
};

// Each part is typed by its shape rule: a composite's own shape rule.
struct MetaEmitter final : OpEmitter {
  Value call(OpId op, const CallArgs& args) override { return Value::tensor(infer_meta(op, args)); }
};

}  // namespace

Value OpEmitter::call(OpId op, std::initializer_list<Value> positional) {
  CallArgs args;
  args.args = positional.begin();
  args.nargs = positional.size();
  return call(op, args);
}

static ForeignOpHook foreign_op_hook = nullptr;
void set_foreign_op_hook(ForeignOpHook hook) { foreign_op_hook = hook; }

static bool holds_foreign(const CallArgs& args) {
  for (size_t i = 0; i < args.nargs; ++i) {  // keyword values included
    const Value& v = args.args[i];
    if (v.is(Kind::Foreign)) return true;
    if (v.is(Kind::List) || v.is(Kind::Tuple)) {
      const auto& items = v.is(Kind::List) ? v.as<ListObj>()->items : v.as<TupleObj>()->items;
      for (const Value& x : items)
        if (x.is(Kind::Foreign)) return true;
    }
  }
  return false;
}

Value call_op(OpId id, const CallArgs& args) {
  if (foreign_op_hook && holds_foreign(args)) {
    Value out;
    if (foreign_op_hook(id, args, out)) return out;
  }
  const OpDef& op = op_def(id);
  OpArgs bound = bind_op_args(op, args);
  if (op.decompose) {
    EagerEmitter e;
    Value r = op.decompose(bound, e);
    if (!r.is_null()) return r;
  }
  return op.eager(bound);
}

Value call_op(OpId id, std::initializer_list<Value> positional) {
  CallArgs args;
  args.args = positional.begin();
  args.nargs = positional.size();
  return call_op(id, args);
}

Tensor infer_meta(OpId id, const CallArgs& args) {
  const OpDef& op = op_def(id);
  OpArgs bound = bind_op_args(op, args);
  if (op.decompose) {
    MetaEmitter e;
    Value r = op.decompose(bound, e);
    if (r.is(Kind::Tensor)) return r.as_tensor();
    if (!r.is_null())
      throw_error(ErrorKind::TypeError, std::string(op.name) + "() returns " + kind_name(r.kind()) +
                                            ", not one tensor: its result has no single shape");
  }
  return op.shape(bound);
}

// The shape and eager kernel of a row whose every call decomposes
// (call_op and infer_meta run the decomposition first); reached only by a
// direct OpDef::shape/eager call, which then decomposes too.
Tensor decomposed_shape(const OpArgs& args) {
  MetaEmitter e;
  Value r = args.op->decompose(args, e);
  if (!r.is(Kind::Tensor))
    throw_error(ErrorKind::TypeError, std::string(args.op->name) + "() does not return one tensor");
  return r.as_tensor();
}

Value decomposed_eager(const OpArgs& args) {
  EagerEmitter e;
  return args.op->decompose(args, e);
}

// ----- OpArgs getters ----------------------------------------------------------

const std::string& OpArgs::param_name(size_t i) const { return op->sig.params()[i].name; }

Tensor OpArgs::tensor(size_t i) const {
  if (!v[i].is(Kind::Tensor)) arg_type_error(*this, i, "Tensor");
  return v[i].as_tensor();
}

int64_t OpArgs::integer(size_t i) const {
  if (!v[i].is(Kind::Int) && !v[i].is(Kind::Bool)) arg_type_error(*this, i, "int");
  return v[i].as_int();
}

double OpArgs::number(size_t i) const {
  if (!v[i].is_number()) arg_type_error(*this, i, "a number");
  return v[i].as_number();
}

bool OpArgs::boolean(size_t i) const {
  if (!v[i].is(Kind::Bool)) arg_type_error(*this, i, "bool");
  return v[i].as_bool();
}

std::vector<int64_t> OpArgs::int_list(size_t i) const {
  const Value& x = v[i];
  if (x.is(Kind::Int) || x.is(Kind::Bool)) return {x.as_int()};
  const std::vector<Value>* items = nullptr;
  if (x.is(Kind::Tuple)) items = &x.as<TupleObj>()->items;
  else if (x.is(Kind::List)) items = &x.as<ListObj>()->items;
  else arg_type_error(*this, i, "an int or a tuple of ints");
  std::vector<int64_t> out;
  out.reserve(items->size());
  for (size_t k = 0; k < items->size(); ++k) {
    const Value& e = (*items)[k];
    if (!e.is(Kind::Int) && !e.is(Kind::Bool))
      throw_error(ErrorKind::TypeError, std::string(op->name) + "(): argument '" + param_name(i) +
                                            "' must be a tuple of ints, but element " + std::to_string(k) +
                                            " is " + kind_name(e.kind()));
    out.push_back(e.as_int());
  }
  return out;
}

// ----- helpers shared by the kernel files ----------------------------------

DType dtype_arg(const OpArgs& args, size_t i, DType dflt) {
  const Value& x = args[i];
  if (x.is_none()) return dflt;
  if (!x.is(Kind::Str)) arg_type_error(args, i, "a dtype name");
  if (auto d = dtype_from_name(x.as_str())) return *d;
  throw_error(ErrorKind::TypeError, std::string(args.op->name) + "(): unknown dtype '" + x.as_str() +
                                        "' (expected float32, float64, int64 or bool)");
}

Tensor meta_view(DType dtype, const Shape& sizes, const Shape& strides, int64_t offset) {
  Tensor m = Tensor::meta(sizes, dtype, strides);
  m.impl()->offset = offset;
  return m;
}

}  // namespace kiln::runtime
