#include "runtime/value/value.h"

#include <functional>
#include <unordered_map>

#include "runtime/base/budget.h"
#include "runtime/value/code.h"
#include "runtime/value/name_map.h"

namespace kiln::runtime {

const char* kind_name(Kind k) {
  switch (k) {
#define KILN_KIND_NAME(name, pyname) \
  case Kind::name: return pyname;
    KILN_VALUE_KINDS(KILN_KIND_NAME)
#undef KILN_KIND_NAME
  }
  return "?";
}

bool Value::same_foreign(const Value& o) const noexcept {
  const auto* a = as<ForeignObj>();
  const auto* b = o.as<ForeignObj>();
  return a->vt == b->vt && a->handle == b->handle;
}

StrObj::StrObj(std::string v) : s(std::move(v)) {}

Ref<StrObj> intern(std::string_view s) {
  // Interned strings are immortal: the table holds a reference forever.
  static auto* table = new std::unordered_map<std::string_view, Ref<StrObj>>();
  auto it = table->find(s);
  if (it != table->end()) return it->second;
  auto obj = make_ref<StrObj>(std::string(s));
  obj->interned = true;
  std::string_view key(obj->s);
  table->emplace(key, obj);
  return obj;
}

Value intern_value(std::string_view s) { return Value::object(Kind::Str, intern(s)); }

Value Value::str(std::string_view s) {
  // A run's memory budget (runtime/base/budget.h) bounds strings too: repr or
  // format of a tuple that holds one tuple twice doubles per level.
  if (s.size() > (size_t(1) << 20)) check_allocation(s.size(), "a str");
  else charge_bytes(s.size());
  return Value::object(Kind::Str, make_ref<StrObj>(std::string(s)));
}

Value Value::tensor(const Tensor& t) {
  if (!t.defined()) throw_error(ErrorKind::RuntimeError, "cannot make a Value of an undefined tensor");
  return Value::object(Kind::Tensor, static_cast<Object*>(t.impl()));
}

Tensor Value::as_tensor() const { return Tensor(Ref<TensorImpl>(static_cast<TensorImpl*>(u_.o))); }

const std::string& Value::as_str() const { return static_cast<StrObj*>(u_.o)->s; }

namespace {
KeySemantics key_semantics;
[[noreturn]] void no_key_semantics() {
  throw_error(ErrorKind::SystemError, "kiln: runtime/semantics is not linked into this program (dict keys have no hash)");
}
}  // namespace
void set_key_semantics(KeySemantics semantics) { key_semantics = semantics; }
size_t ValueHash::operator()(const Value& v) const {
  if (!key_semantics.hash) no_key_semantics();
  return key_semantics.hash(v);
}
bool ValueEq::operator()(const Value& a, const Value& b) const {
  if (!key_semantics.equal) no_key_semantics();
  return key_semantics.equal(a, b);
}

void release_items(std::vector<Value>& items) {
  constexpr int kMaxDepth = 256;
  thread_local int depth = 0;
  thread_local std::vector<Value> parked;
  if (depth >= kMaxDepth) {
    for (Value& v : items)
      if (v.is_heap()) parked.push_back(std::move(v));
    items.clear();
    return;
  }
  ++depth;
  items.clear();  // may re-enter for nested containers, up to kMaxDepth
  if (depth == 1) {
    while (!parked.empty()) {
      Value v = std::move(parked.back());
      parked.pop_back();
    }  // each v dies here, at depth 1 again
  }
  --depth;
}

DictObj::~DictObj() { DictObj::clear(); }

void DictObj::traverse(Visitor& v) const {
  for (const auto& [k, x] : entries) {
    visit(v, k);
    visit(v, x);
  }
  for (const auto& [k, i] : index) visit(v, k);
}

// The clear() methods empty the object first and drop what it held after,
// so a destructor that runs meanwhile sees a consistent (empty) object.
void DictObj::clear() {
  index.clear();
  std::vector<Value> items;
  items.reserve(entries.size() * 2);
  for (auto& [k, v] : entries) {
    items.push_back(std::move(k));
    items.push_back(std::move(v));
  }
  entries.clear();
  release_items(items);
}

void ListObj::clear() {
  std::vector<Value> old;
  old.swap(items);
  release_items(old);
}

void CellObj::clear() {
  Value old = std::move(v);
  v = Value::null();
}

namespace {
HostCellStoreHook host_cell_store_hook = nullptr;
}  // namespace

void set_host_cell_store_hook(HostCellStoreHook hook) { host_cell_store_hook = hook; }

void host_cell_stored(CellObj* cell) {
  if (cell->host && host_cell_store_hook) host_cell_store_hook(cell);
}

const Value* DictObj::find(const Value& key) const {
  auto it = index.find(key);
  return it == index.end() ? nullptr : &entries[it->second].second;
}

void DictObj::set(const Value& key, Value value) {
  auto it = index.find(key);
  if (it != index.end()) {
    entries[it->second].second = std::move(value);
    return;
  }
  index.emplace(key, entries.size());
  entries.emplace_back(key, std::move(value));
}

bool DictObj::erase(const Value& key) {
  auto it = index.find(key);
  if (it == index.end()) return false;
  size_t pos = it->second;
  entries.erase(entries.begin() + ptrdiff_t(pos));
  index.erase(it);
  for (auto& [k, i] : index)
    if (i > pos) --i;
  return true;
}

int64_t RangeObj::length() const {
  if (step > 0 && start < stop) return (stop - start + step - 1) / step;
  if (step < 0 && start > stop) return (start - stop - step - 1) / (-step);
  return 0;
}

namespace {
HostFunctionAttr host_function_attr_hook = nullptr;
}
void set_host_function_attr(HostFunctionAttr hook) { host_function_attr_hook = hook; }
bool host_function_attr(const FunctionObj& fn, std::string_view name, Value& out) {
  return host_function_attr_hook && host_function_attr_hook(fn, name, out);
}

FunctionObj::FunctionObj() = default;
FunctionObj::~FunctionObj() = default;
void FunctionObj::traverse(Visitor& v) const {
  visit(v, code);
  visit(v, defaults);
  visit(v, kwdefaults);
  for (const Ref<CellObj>& c : closure) visit(v, c);
  visit(v, globals);
}
// The code stays: the VM never meets a function without one, and a code
// object closes no cycle (its constants are made before it).
void FunctionObj::clear() {
  std::vector<Value> d, k;
  d.swap(defaults);
  k.swap(kwdefaults);
  std::vector<Ref<CellObj>> c;
  c.swap(closure);
  Ref<GlobalsObj> g = std::move(globals);
  globals = nullptr;
}

Value CallContext::call(const Value& callee, std::initializer_list<Value> positional) {
  CallArgs args;
  args.args = positional.begin();
  args.nargs = positional.size();
  return call(callee, args);
}

namespace {
thread_local CallContext* t_current_context = nullptr;
}
CallContext* CallContext::current() noexcept { return t_current_context; }
CallContext::Scope::Scope(CallContext* c) noexcept : prev_(t_current_context) { t_current_context = c; }
CallContext::Scope::~Scope() { t_current_context = prev_; }

void CallContext::zero_arg_super(Value&, Value&) {
  throw_error(ErrorKind::RuntimeError, "super(): no arguments");
}

Value make_builtin(std::string name, BuiltinFn fn, int64_t data) {
  auto b = make_ref<BuiltinObj>();
  b->name = std::move(name);
  b->fn = fn;
  b->data = data;
  return Value::object(Kind::Builtin, b);
}

Value make_builtin_closure(std::string name, NativeClosure fn, std::vector<Ref<Object>> held) {
  Value b = make_builtin(std::move(name), [](CallContext& ctx, const BuiltinObj& self, const CallArgs& args) {
    return self.closure(ctx, args);
  });
  b.as<BuiltinObj>()->closure = std::move(fn);
  b.as<BuiltinObj>()->held = std::move(held);
  return b;
}

Value make_tuple(std::vector<Value> items) {
  auto t = make_ref<TupleObj>();
  t->items = std::move(items);
  return Value::object(Kind::Tuple, t);
}

Value make_list(std::vector<Value> items) {
  auto l = make_ref<ListObj>();
  l->items = std::move(items);
  return Value::object(Kind::List, l);
}

Value make_dict() { return Value::object(Kind::Dict, make_ref<DictObj>()); }

Value make_range(int64_t start, int64_t stop, int64_t step) {
  if (step == 0) throw_error(ErrorKind::ValueError, "range() arg 3 must not be zero");
  auto r = make_ref<RangeObj>();
  r->start = start;
  r->stop = stop;
  r->step = step;
  return Value::object(Kind::Range, r);
}

}  // namespace kiln::runtime

namespace kiln::runtime {
static GradModeHook grad_mode_hook = nullptr;
void set_grad_mode_hook(GradModeHook hook) { grad_mode_hook = hook; }
bool grad_mode_enabled() { return grad_mode_hook && grad_mode_hook(); }
static HostTensorSample host_tensor_sample_hook = nullptr;
void set_host_tensor_sample(HostTensorSample hook) { host_tensor_sample_hook = hook; }
Value host_tensor_sample(const Tensor& meta) { return host_tensor_sample_hook ? host_tensor_sample_hook(meta) : Value::null(); }
}  // namespace kiln::runtime
