// The Module base class's methods and the built-in module classes (Linear,
// ReLU, ..., LazyLinear), implemented natively; plus container indexing and
// torch's nested repr.
#include <algorithm>
#include <cmath>

#include "runtime/nn/builtin_forward.h"
#include "runtime/nn/module.h"
#include "runtime/nn/module_walkers.h"
#include "runtime/semantics/exceptions.h"
#include "runtime/semantics/signature.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/tensor/ops.h"

namespace kiln::runtime {

namespace {

ModuleObj* self_of(const std::vector<Value>& a) { return a[0].as<ModuleObj>(); }

Value pairs_to_list(const std::vector<std::pair<std::string, Value>>& items, bool with_names) {
  std::vector<Value> out;
  for (const auto& [n, v] : items) out.push_back(with_names ? make_tuple({Value::str(n), v}) : v);
  return make_list(std::move(out));
}

// torch.nn.Linear's default init: U(-1/sqrt(in), 1/sqrt(in)) from the
// global generator, so manual_seed makes models reproducible.
Value uniform_param(const Shape& shape, double bound) {
  std::vector<Value> dims;
  for (int64_t s : shape) dims.push_back(Value::integer(s));
  Value r = call_op(OpId::rand, {make_tuple(dims)});
  Value scaled = call_op(OpId::sub, {call_op(OpId::mul, {r, Value::floating(2 * bound)}), Value::floating(bound)});
  return Value::tensor(scaled.as_tensor().as_parameter());
}

Value param_of(const Value& t) { return Value::tensor(t.as_tensor().as_parameter()); }

Value shape_value(std::initializer_list<int64_t> dims) {
  std::vector<Value> v;
  for (int64_t d : dims) v.push_back(Value::integer(d));
  return make_tuple(std::move(v));
}

void init_linear_params(ModuleObj* m, int64_t in, int64_t out, bool bias) {
  double bound = in > 0 ? 1.0 / std::sqrt(double(in)) : 0.0;
  register_parameter(m, "weight", uniform_param({out, in}, bound));
  register_parameter(m, "bias", bias ? uniform_param({out}, bound) : Value::none());
  m->attrs.set("in_features", Value::integer(in));
  m->attrs.set("out_features", Value::integer(out));
}

Value attr(ModuleObj* m, const char* name) {
  const Value* v = m->attrs.find(name);
  return v ? *v : Value::none();
}

// ---- Module base methods ----------------------------------------------------

Value base_init(CallContext&, const std::vector<Value>&) { return Value::none(); }
Value m_parameters(CallContext&, const std::vector<Value>& a) {
  return pairs_to_list(named_parameters(self_of(a), truth(a[1])), false);
}
// torch's signatures: (prefix='', recurse=True, remove_duplicate=True).
std::string prefix_arg(const Value& v) {
  if (!v.is(Kind::Str)) throw_error(ErrorKind::TypeError, "prefix must be a str");
  return v.as<StrObj>()->s;
}
Value m_named_parameters(CallContext&, const std::vector<Value>& a) {
  return pairs_to_list(with_prefix(named_parameters(self_of(a), truth(a[2]), truth(a[3])), prefix_arg(a[1])), true);
}
Value m_buffers(CallContext&, const std::vector<Value>& a) {
  return pairs_to_list(named_buffers(self_of(a), truth(a[1])), false);
}
Value m_named_buffers(CallContext&, const std::vector<Value>& a) {
  return pairs_to_list(with_prefix(named_buffers(self_of(a), truth(a[2]), truth(a[3])), prefix_arg(a[1])), true);
}
Value m_children(CallContext&, const std::vector<Value>& a) { return pairs_to_list(named_children(self_of(a)), false); }
Value m_named_children(CallContext&, const std::vector<Value>& a) {
  return pairs_to_list(named_children(self_of(a)), true);
}
Value m_modules(CallContext&, const std::vector<Value>& a) { return pairs_to_list(named_modules(self_of(a)), false); }
// (memo=None, prefix='', remove_duplicate=True): a memo set is not kiln's
// Module model (NotImplementedError, never a silent difference).
Value m_named_modules(CallContext&, const std::vector<Value>& a) {
  if (!a[1].is_none()) throw_error(ErrorKind::NotImplementedError, "named_modules() with a memo set");
  return pairs_to_list(with_prefix(named_modules(self_of(a), truth(a[3])), prefix_arg(a[2])), true);
}
Value m_state_dict(CallContext&, const std::vector<Value>& a) { return state_dict(self_of(a)); }
Value m_load_state_dict(CallContext&, const std::vector<Value>& a) {
  load_state_dict(self_of(a), a[1]);
  return Value::none();
}
Value m_train(CallContext&, const std::vector<Value>& a) {
  set_training(self_of(a), truth(a[1]));
  return a[0];
}
Value m_eval(CallContext&, const std::vector<Value>& a) {
  set_training(self_of(a), false);
  return a[0];
}
Value m_register_buffer(CallContext&, const std::vector<Value>& a) {
  if (!a[1].is(Kind::Str)) throw_error(ErrorKind::TypeError, "buffer name should be a string");
  register_buffer(self_of(a), a[1].as_str(), a[2]);
  return Value::none();
}
Value m_register_parameter(CallContext&, const std::vector<Value>& a) {
  if (!a[1].is(Kind::Str)) throw_error(ErrorKind::TypeError, "parameter name should be a string");
  register_parameter(self_of(a), a[1].as_str(), a[2]);
  return Value::none();
}
Value m_add_module(CallContext&, const std::vector<Value>& a) {
  if (!a[1].is(Kind::Str)) throw_error(ErrorKind::TypeError, "module name should be a string");
  add_module(self_of(a), a[1].as_str(), a[2]);
  return Value::none();
}

// A hook handle: handle.remove() takes the hook off its module.
struct HookHandle {
  Ref<ModuleObj> module;
  int64_t id;
};
// handle.remove is a bound method of the module (not of the handle), so it
// stays valid however long the caller keeps it.
Value handle_remove(CallContext&, const BuiltinObj& self, const CallArgs& args) {
  remove_hook(args[0].as<ModuleObj>(), self.data);
  return Value::none();
}
const ForeignVTable kHookHandleVT = [] {
  ForeignVTable vt = {
    "RemovableHandle",
    [](void* h) { delete static_cast<HookHandle*>(h); },
    [](void* h, std::string_view name) -> Value {
      auto* handle = static_cast<HookHandle*>(h);
      if (name == "id") return Value::integer(handle->id);
      if (name == "remove") {
        auto bm = make_ref<BoundMethodObj>();
        bm->func = make_builtin("RemovableHandle.remove", handle_remove, handle->id);
        bm->self = Value::object(Kind::Module, handle->module);
        return Value::object(Kind::BoundMethod, bm);
      }
      throw_error(ErrorKind::AttributeError, "'RemovableHandle' object has no attribute '" + std::string(name) + "'");
    },
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    [](void* h) { return "<RemovableHandle id=" + std::to_string(static_cast<HookHandle*>(h)->id) + ">"; },
    nullptr,
  };
  // The handle owns its module: a handle registered as a hook of that very
  // module is a cycle the census (and a collector) must see (a fuzz
  // finding: the unreported reference showed as a leaked module).
  vt.traverse = [](void* h, Visitor& v) { visit(v, static_cast<HookHandle*>(h)->module); };
  vt.clear = [](void* h) {
    Ref<ModuleObj> gone = std::move(static_cast<HookHandle*>(h)->module);
  };
  return vt;
}();
Value make_handle(ModuleObj* m, int64_t id) {
  auto f = make_ref<ForeignObj>(&kHookHandleVT, new HookHandle{Ref<ModuleObj>(m), id});
  return Value::object(Kind::Foreign, f);
}
Value m_register_forward_pre_hook(CallContext&, const std::vector<Value>& a) {
  return make_handle(self_of(a), add_forward_pre_hook(self_of(a), a[1]));
}
Value m_register_forward_hook(CallContext&, const std::vector<Value>& a) {
  return make_handle(self_of(a), add_forward_hook(self_of(a), a[1]));
}
Value m_remove_hook(CallContext&, const std::vector<Value>& a) {
  return Value::boolean(remove_hook(self_of(a), to_index(a[1], "hook id")));
}

// ---- built-in classes -------------------------------------------------------

int64_t int_arg(const Value& v, const char* what) { return to_index(v, what); }

Value linear_init(CallContext&, const std::vector<Value>& a) {
  init_linear_params(self_of(a), int_arg(a[1], "in_features"), int_arg(a[2], "out_features"), truth(a[3]));
  return Value::none();
}
Value lazy_linear_init(CallContext&, const std::vector<Value>& a) {
  ModuleObj* m = self_of(a);
  register_parameter(m, "weight", Value::none());
  register_parameter(m, "bias", Value::none());
  m->attrs.set("in_features", Value::integer(0));
  m->attrs.set("out_features", Value::integer(int_arg(a[1], "out_features")));
  m->attrs.set("_lazy_bias", Value::boolean(truth(a[2])));
  m->lazy = true;
  m->bump_version();
  return Value::none();
}
Value gelu_init(CallContext&, const std::vector<Value>& a) {
  if (!a[1].is(Kind::Str) || (a[1].as_str() != "none" && a[1].as_str() != "tanh"))
    throw_error(ErrorKind::ValueError, "GELU: approximate must be 'none' or 'tanh', got " + repr(a[1]));
  self_of(a)->attrs.set("approximate", a[1]);
  return Value::none();
}
Value layer_norm_init(CallContext&, const std::vector<Value>& a) {
  ModuleObj* m = self_of(a);
  Value shape = a[1].is(Kind::Int) ? make_tuple({a[1]}) : make_tuple(to_vector(a[1]));
  m->attrs.set("normalized_shape", shape);
  m->attrs.set("eps", a[2]);
  m->attrs.set("elementwise_affine", Value::boolean(truth(a[3])));
  if (truth(a[3])) {
    register_parameter(m, "weight", param_of(call_op(OpId::ones, {shape})));
    register_parameter(m, "bias", param_of(call_op(OpId::zeros, {shape})));
  } else {
    register_parameter(m, "weight", Value::none());
    register_parameter(m, "bias", Value::none());
  }
  return Value::none();
}
Value embedding_init(CallContext&, const std::vector<Value>& a) {
  ModuleObj* m = self_of(a);
  int64_t n = int_arg(a[1], "num_embeddings"), d = int_arg(a[2], "embedding_dim");
  m->attrs.set("num_embeddings", Value::integer(n));
  m->attrs.set("embedding_dim", Value::integer(d));
  register_parameter(m, "weight", param_of(call_op(OpId::randn, {shape_value({n, d})})));
  return Value::none();
}
Value dropout_init(CallContext&, const std::vector<Value>& a) {
  double p = a[1].is_number() ? a[1].as_number() : -1.0;
  if (p < 0 || p > 1)
    throw_error(ErrorKind::ValueError, "dropout probability has to be between 0 and 1, but got " + repr(a[1]));
  self_of(a)->attrs.set("p", Value::floating(p));
  return Value::none();
}

// The eager backend of run_builtin_forward (runtime/nn/builtin_forward.h):
// values, each op run now.
struct EagerForward {
  using V = Value;
  CallContext& ctx;
  ModuleObj* m;
  Value read(const ForwardOperand& o) {
    const Value* v = (o.from == OperandFrom::Param ? m->params : m->attrs).find(o.name);
    return v ? *v : Value::none();
  }
  Value constant(Value v) { return v; }
  Value op(OpId id, std::vector<Value> args) { return call_op(id, CallArgs{args.data(), args.size(), nullptr}); }
  // Another library's tensor (a torch tensor that requires grad).
  bool records_grad(const Value& x) { return x.is(Kind::Foreign); }
  void require_tensor(const Value& x) {
    if (!x.is(Kind::Tensor)) throw_error(ErrorKind::TypeError, "Dropout expects a Tensor");
  }
  Value sizes_of(const Value& x) {
    std::vector<Value> dims;
    for (int64_t s : x.as_tensor().sizes()) dims.push_back(Value::integer(s));
    return make_tuple(std::move(dims));
  }
  Value call_children(const Value& x0) {
    Value x = x0;
    for (const auto& [name, child] : m->modules)
      if (!child.is_none()) x = ctx.call(child, {x});
    return x;
  }
  [[noreturn]] void fail(const std::string& message) { throw_error(ErrorKind::TypeError, message); }
};

// The forward method of the built-in class K: its kBuiltinForwards row.
template <BuiltinModule K>
Value builtin_forward(CallContext& ctx, const std::vector<Value>& a) {
  EagerForward b{ctx, self_of(a)};
  return run_builtin_forward(b, self_of(a), K, a[1]);
}

void add_children(ModuleObj* m, const std::vector<Value>& mods) {
  int64_t i = int64_t(m->modules.size());
  for (const Value& v : mods) add_module(m, std::to_string(i++), v);
}
Value sequential_init(CallContext&, const std::vector<Value>& a) {
  add_children(self_of(a), a[1].as<TupleObj>()->items);
  return Value::none();
}
Value module_list_init(CallContext&, const std::vector<Value>& a) {
  if (!a[1].is_none()) add_children(self_of(a), to_vector(a[1]));
  return Value::none();
}
Value module_list_append(CallContext&, const std::vector<Value>& a) {
  add_children(self_of(a), {a[1]});
  return a[0];
}
Value module_list_extend(CallContext&, const std::vector<Value>& a) {
  add_children(self_of(a), to_vector(a[1]));
  return a[0];
}
Value module_dict_init(CallContext&, const std::vector<Value>& a) {
  if (a[1].is(Kind::Dict))
    for (const auto& [k, v] : a[1].as<DictObj>()->entries) add_module(self_of(a), to_str(k), v);
  else if (!a[1].is_none())
    throw_error(ErrorKind::TypeError, "ModuleDict() expects a dict of modules");
  return Value::none();
}
Value module_dict_keys(CallContext&, const std::vector<Value>& a) {
  std::vector<Value> out;
  for (const auto& [k, v] : self_of(a)->modules) out.push_back(Value::str(k->s));
  return make_list(std::move(out));
}
Value module_dict_values(CallContext&, const std::vector<Value>& a) {
  std::vector<Value> out;
  for (const auto& [k, v] : self_of(a)->modules) out.push_back(v);
  return make_list(std::move(out));
}
Value module_dict_items(CallContext&, const std::vector<Value>& a) {
  std::vector<Value> out;
  for (const auto& [k, v] : self_of(a)->modules) out.push_back(make_tuple({Value::str(k->s), v}));
  return make_list(std::move(out));
}

struct MethodDef {
  const char* name;
  const char* signature;
  NativeFn fn;
};

// The module-tree walkers, torch's signatures: the translator answers them
// at trace time (interpreter/nn_module.cpp binds through these same rows,
// module_walkers.h). Every other method changes a module (register_*,
// train, load_state_dict, ...) or is a forward the translator calls as a
// module. ModuleDict's views are walkers too.
const MethodDef kWalkers[] = {
    {"parameters", "self, recurse=True", m_parameters},
    {"named_parameters", "self, prefix='', recurse=True, remove_duplicate=True", m_named_parameters},
    {"buffers", "self, recurse=True", m_buffers},
    {"named_buffers", "self, prefix='', recurse=True, remove_duplicate=True", m_named_buffers},
    {"children", "self", m_children},
    {"named_children", "self", m_named_children},
    {"modules", "self", m_modules},
    {"named_modules", "self, memo=None, prefix='', remove_duplicate=True", m_named_modules},
};
const MethodDef kModuleDictViews[] = {
    {"keys", "self", module_dict_keys},
    {"values", "self", module_dict_values},
    {"items", "self", module_dict_items},
};

bool is_walker(std::string_view name) {
  auto named = [&](const MethodDef& m) { return m.name == name; };
  return std::any_of(std::begin(kWalkers), std::end(kWalkers), named) ||
         std::any_of(std::begin(kModuleDictViews), std::end(kModuleDictViews), named);
}

// `methods`, then the rows of `tables` (the shared walker rows above).
Ref<ClassObj> build_class(const char* name, Ref<ClassObj> base, BuiltinModule kind,
                          std::initializer_list<MethodDef> methods,
                          std::initializer_list<std::pair<const MethodDef*, const MethodDef*>> tables = {}) {
  auto c = make_ref<ClassObj>();
  c->name = name;
  c->base = std::move(base);
  c->builtin = kind;
  auto add = [&](const MethodDef& m) {
    // A method: the receiver is checked before the native casts it (found
    // by tests/fuzz: Module.eval called on a builtin read it as a module).
    Value b = make_native_method(Kind::Module, name, m.name, m.signature, m.fn);
    if (is_walker(m.name)) b.as<BuiltinObj>()->how = BuiltinHow::Trace;
    c->methods.set(m.name, b);
  };
  for (const MethodDef& m : methods) add(m);
  for (const auto& [first, last] : tables) std::for_each(first, last, add);
  return c;
}

}  // namespace

const Signature* module_walker_signature(std::string_view method) {
  static const auto* signatures = [] {
    auto* m = new std::vector<std::pair<std::string_view, Signature>>();  // never destroyed: read at exit too
    for (const MethodDef& w : kWalkers) m->emplace_back(w.name, Signature(w.name, w.signature));
    return m;
  }();
  for (const auto& [name, sig] : *signatures)
    if (name == method) return &sig;
  return nullptr;
}

Ref<ClassObj> root_module_class() {
  // The walkers' signatures are made with the class (their defaults are
  // objects: made lazily at a first trace, they would count as a leak of
  // that run to the census, runtime/semantics/census.h).
  static const Signature* warm = module_walker_signature("parameters");
  (void)warm;
  static Ref<ClassObj> cls = build_class(
      "Module", nullptr, BuiltinModule::None,
      {{"__init__", "self", base_init},
       {"state_dict", "self", m_state_dict},
       {"load_state_dict", "self, state_dict", m_load_state_dict},
       {"train", "self, mode=True", m_train},
       {"eval", "self", m_eval},
       {"register_buffer", "self, name, tensor", m_register_buffer},
       {"register_parameter", "self, name, param", m_register_parameter},
       {"add_module", "self, name, module", m_add_module},
       {"register_forward_pre_hook", "self, hook", m_register_forward_pre_hook},
       {"register_forward_hook", "self, hook", m_register_forward_hook},
       {"remove_hook", "self, id", m_remove_hook}},
      {{std::begin(kWalkers), std::end(kWalkers)}});
  return cls;
}

Ref<ClassObj> builtin_module_class(BuiltinModule kind) {
  static const Ref<ClassObj> classes[] = {
      nullptr,
      build_class("Linear", root_module_class(), BuiltinModule::Linear,
                  {{"__init__", "self, in_features, out_features, bias=True", linear_init},
                   {"forward", "self, input", builtin_forward<BuiltinModule::Linear>}}),
      build_class("ReLU", root_module_class(), BuiltinModule::ReLU,
                  {{"forward", "self, input", builtin_forward<BuiltinModule::ReLU>}}),
      build_class("GELU", root_module_class(), BuiltinModule::GELU,
                  {{"__init__", "self, approximate='none'", gelu_init},
                   {"forward", "self, input", builtin_forward<BuiltinModule::GELU>}}),
      build_class("LayerNorm", root_module_class(), BuiltinModule::LayerNorm,
                  {{"__init__", "self, normalized_shape, eps=1e-05, elementwise_affine=True", layer_norm_init},
                   {"forward", "self, input", builtin_forward<BuiltinModule::LayerNorm>}}),
      build_class("Embedding", root_module_class(), BuiltinModule::Embedding,
                  {{"__init__", "self, num_embeddings, embedding_dim", embedding_init},
                   {"forward", "self, input", builtin_forward<BuiltinModule::Embedding>}}),
      build_class("Dropout", root_module_class(), BuiltinModule::Dropout,
                  {{"__init__", "self, p=0.5", dropout_init},
                   {"forward", "self, input", builtin_forward<BuiltinModule::Dropout>}}),
      build_class("Sequential", root_module_class(), BuiltinModule::Sequential,
                  {{"__init__", "self, *modules", sequential_init},
                   {"forward", "self, input", builtin_forward<BuiltinModule::Sequential>},
                   {"append", "self, module", module_list_append}}),
      build_class("ModuleList", root_module_class(), BuiltinModule::ModuleList,
                  {{"__init__", "self, modules=None", module_list_init},
                   {"append", "self, module", module_list_append},
                   {"extend", "self, modules", module_list_extend}}),
      build_class("ModuleDict", root_module_class(), BuiltinModule::ModuleDict,
                  {{"__init__", "self, modules=None", module_dict_init}},
                  {{std::begin(kModuleDictViews), std::end(kModuleDictViews)}}),
      build_class("LazyLinear", root_module_class(), BuiltinModule::LazyLinear,
                  {{"__init__", "self, out_features, bias=True", lazy_linear_init},
                   {"forward", "self, input", builtin_forward<BuiltinModule::LazyLinear>}}),
  };
  static_assert(std::size(classes) == size_t(BuiltinModule::LazyLinear) + 1,
                "one class per KILN_BUILTIN_MODULES row, in order");
  return classes[size_t(kind)];
}

void materialize_lazy(ModuleObj* m, const CallArgs& args) {
  // torch's LazyLinear: the first input fixes in_features, then the module
  // becomes a plain Linear (cls_to_become).
  if (args.npos() == 0 || !args[0].is(Kind::Tensor))
    throw_error(ErrorKind::TypeError, m->class_name() + ": the first call must pass the input tensor");
  Tensor x = args[0].as_tensor();
  if (x.dim() == 0) throw_error(ErrorKind::RuntimeError, "LazyLinear: input must have at least one dimension");
  bool bias = truth(attr(m, "_lazy_bias"));
  m->attrs.erase(intern("_lazy_bias").get());
  init_linear_params(m, x.size(-1), attr(m, "out_features").as_int(), bias);
  m->cls = builtin_module_class(BuiltinModule::Linear);
  m->lazy = false;
  m->bump_version();
}

// ---- containers ---------------------------------------------------------------

static bool is_container(const ModuleObj* m, bool* is_dict) {
  auto k = m->cls->builtin_kind();
  *is_dict = k == BuiltinModule::ModuleDict;
  return k == BuiltinModule::Sequential || k == BuiltinModule::ModuleList || *is_dict;
}

Value module_getitem(const Value& module, const Value& key) {
  auto* m = module.as<ModuleObj>();
  bool is_dict;
  if (!is_container(m, &is_dict))
    throw_error(ErrorKind::TypeError, "'" + m->class_name() + "' object is not subscriptable");
  if (is_dict) {
    if (!key.is(Kind::Str)) throw_key_error(key);
    const Value* v = m->modules.find(key.as_str());
    if (!v) throw_key_error(key);
    return *v;
  }
  const auto& entries = m->modules.entries();
  if (key.is(Kind::Slice)) {
    // A slice of a Sequential/ModuleList is a new container of the same class.
    Value children = get_item(make_list(module_iter_items(module)), key);
    auto out = new_module(m->cls);
    add_children(out.get(), children.as<ListObj>()->items);
    return Value::object(Kind::Module, out);
  }
  int64_t i = to_index(key, "module index");
  int64_t n = int64_t(entries.size());
  if (i < 0) i += n;
  if (i < 0 || i >= n) throw_error(ErrorKind::IndexError, "index " + repr(key) + " is out of range");
  return entries[size_t(i)].second;
}

int64_t module_len(const Value& module) {
  auto* m = module.as<ModuleObj>();
  bool is_dict;
  if (!is_container(m, &is_dict))
    throw_error(ErrorKind::TypeError, "object of type '" + m->class_name() + "' has no len()");
  return int64_t(m->modules.size());
}

std::vector<Value> module_iter_items(const Value& module) {
  auto* m = module.as<ModuleObj>();
  bool is_dict;
  if (!is_container(m, &is_dict))
    throw_error(ErrorKind::TypeError, "'" + m->class_name() + "' object is not iterable");
  std::vector<Value> out;
  for (const auto& [k, v] : m->modules) out.push_back(is_dict ? Value::str(k->s) : v);
  return out;
}

static std::string extra_repr(const ModuleObj* m) {
  auto get = [&](const char* n) {
    const Value* v = m->attrs.find(n);
    return v ? repr(*v) : std::string("?");
  };
  const Value* bias = m->params.find("bias");
  std::string has_bias = (bias && !bias->is_none()) ? "True" : "False";
  switch (m->cls->builtin) {
    case BuiltinModule::Linear:
      return "in_features=" + get("in_features") + ", out_features=" + get("out_features") + ", bias=" + has_bias;
    case BuiltinModule::LazyLinear:
      return "in_features=0, out_features=" + get("out_features") + ", bias=" + to_str(*m->attrs.find("_lazy_bias"));
    case BuiltinModule::GELU: return "approximate=" + get("approximate");
    case BuiltinModule::LayerNorm:
      return get("normalized_shape") + ", eps=" + get("eps") + ", elementwise_affine=" + get("elementwise_affine");
    case BuiltinModule::Embedding: return get("num_embeddings") + ", " + get("embedding_dim");
    case BuiltinModule::Dropout: return "p=" + get("p") + ", inplace=False";
    default: return "";
  }
}

std::string module_repr(const ModuleObj* m) {
  // A module listed inside itself prints by name only (torch would recurse).
  thread_local std::vector<const ModuleObj*> active;
  if (std::find(active.begin(), active.end(), m) != active.end()) return m->class_name() + "(...)";
  if (active.size() > 1000) throw_error(ErrorKind::RecursionError, "module nesting too deep to print");
  active.push_back(m);
  struct Pop {
    ~Pop() { active.pop_back(); }
  } pop;
  std::string s = m->class_name() + "(" + extra_repr(m);
  if (m->modules.empty()) return s + ")";
  s += "\n";
  for (const auto& [name, child] : m->modules) {
    std::string body = child.is_none() ? "None" : module_repr(child.as<ModuleObj>());
    std::string indented;
    for (char c : body) indented += c == '\n' ? std::string("\n  ") : std::string(1, c);
    s += "  (" + name->s + "): " + indented + "\n";
  }
  return s + ")";
}

}  // namespace kiln::runtime
