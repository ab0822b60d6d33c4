#include "runtime/semantics/kwargs.h"

#include "runtime/semantics/class_model.h"
#include "runtime/semantics/value_ops.h"
#include "runtime/value/code.h"
#include "runtime/value/name_map.h"

namespace kiln::runtime {

namespace {
std::string with_module(CallContext& ctx, const Value& fn, const std::string& qualname) {
  // A Python function's module is its globals' __name__ (the frontend makes
  // the mirror carry it); a .kbc program has none, so no prefix.
  if (fn.is(Kind::Function)) {
    auto* f = fn.as<FunctionObj>();
    if (f->globals)
      if (const Value* mod = f->globals->map.find("__name__"); mod && mod->is(Kind::Str) && mod->as_str() != "builtins")
        return mod->as_str() + "." + qualname + "()";
    return qualname + "()";
  }
  if (fn.is(Kind::Foreign)) {
    static const Ref<StrObj> module_name = intern("__module__");
    Value mod = get_attr_or_null(ctx, fn, module_name.get());
    if (mod.is(Kind::Str) && mod.as_str() != "builtins") return mod.as_str() + "." + qualname + "()";
  }
  return qualname + "()";
}
}  // namespace

std::string function_str(CallContext& ctx, const Value& callee) {
  switch (callee.kind()) {
    case Kind::Function: return with_module(ctx, callee, callee.as<FunctionObj>()->code->qualname);
    case Kind::BoundMethod: return function_str(ctx, callee.as<BoundMethodObj>()->func);
    case Kind::Builtin: return callee.as<BuiltinObj>()->name + "()";
    case Kind::Class: return callee.as<ClassObj>()->name + "()";
    case Kind::Foreign: {
      static const Ref<StrObj> qualname = intern("__qualname__");
      Value q = get_attr_or_null(ctx, callee, qualname.get());
      if (q.is(Kind::Str)) return with_module(ctx, callee, q.as_str());
      break;
    }
    default: break;
  }
  return type_name(callee) + " object";
}

void dict_merge(CallContext& ctx, const Value& dict, const Value& mapping, const Value& callee) {
  auto* d = dict.as<DictObj>();
  auto put = [&](const Value& k, const Value& v) {
    if (d->find(k)) {
      // CPython formats the key with str() (%S); a non-str key that is not
      // a duplicate is CALL_EX's error ("keywords must be strings").
      std::string key = to_str(k);
      throw_error(ErrorKind::TypeError,
                  function_str(ctx, callee) + " got multiple values for keyword argument '" + key + "'");
    }
    d->set(k, v);
  };
  if (mapping.is(Kind::Dict)) {
    // A snapshot: merging a dict into itself is still a duplicate error.
    std::vector<std::pair<Value, Value>> entries = mapping.as<DictObj>()->entries;
    for (const auto& [k, v] : entries) put(k, v);
    return;
  }
  // The mapping protocol: keys(), then m[k] for each.
  static const Ref<StrObj> keys_name = intern("keys");
  Value keys = mapping.is(Kind::Module) ? Value::null() : get_attr_or_null(ctx, mapping, keys_name.get());
  if (keys.is_null())
    throw_error(ErrorKind::TypeError,
                function_str(ctx, callee) + " argument after ** must be a mapping, not " + type_name(mapping));
  static const Ref<StrObj> getitem_name = intern("__getitem__");
  Value getitem = mapping.is(Kind::Foreign) ? get_attr(ctx, mapping, getitem_name.get()) : Value::null();
  for (const Value& k : to_vector(ctx.call(keys, {})))
    put(k, getitem.is_null() ? get_item(mapping, k) : ctx.call(getitem, {k}));
}

}  // namespace kiln::runtime
