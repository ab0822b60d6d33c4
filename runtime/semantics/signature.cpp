#include "runtime/semantics/signature.h"

#include <cstdlib>
#include <deque>

#include "runtime/semantics/value_ops.h"

namespace kiln::runtime {

namespace {
std::string trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string_view::npos ? std::string() : std::string(s.substr(b, e - b + 1));
}

Value parse_default(const std::string& fname, const std::string& text) {
  if (text == "?") return Value::null();  // optional, no default: the callee sees Null
  if (text == "None") return Value::none();
  if (text == "True") return Value::boolean(true);
  if (text == "False") return Value::boolean(false);
  if (text.size() >= 2 && (text[0] == '\'' || text[0] == '"')) return Value::str(text.substr(1, text.size() - 2));
  char* end = nullptr;
  long long i = std::strtoll(text.c_str(), &end, 10);
  if (*end == '\0') return Value::integer(i);
  double d = std::strtod(text.c_str(), &end);
  if (*end == '\0') return Value::floating(d);
  // A bad signature is a bug in kiln's own tables, found at startup.
  throw_error(ErrorKind::RuntimeError, "signature of " + fname + "(): bad default '" + text + "'");
}
}  // namespace

Signature::Signature(std::string fname, std::string_view text, bool lone_sequence_varargs)
    : fname_(std::move(fname)), lone_sequence_varargs_(lone_sequence_varargs) {
  bool kwonly = false;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    std::string part = trim(text.substr(start, comma - start));
    start = comma + 1;
    if (part.empty()) continue;
    if (part == "*") {
      kwonly = true;
      continue;
    }
    if (part == "/") {
      for (Param& q : params_) q.posonly = true;
      continue;
    }
    Param p;
    if (part.rfind("**", 0) == 0) {
      p.varkw = true;
      part = part.substr(2);
    } else if (part[0] == '*') {
      p.varargs = true;
      part = part.substr(1);
    }
    p.kwonly = kwonly && !p.varkw;
    if (p.varargs) kwonly = true;
    size_t eq = part.find('=');
    if (eq != std::string::npos) {
      p.has_default = true;
      p.default_value = parse_default(fname_, trim(part.substr(eq + 1)));
      part = trim(part.substr(0, eq));
    }
    p.name = part;
    params_.push_back(std::move(p));
  }
}

int Signature::index_of(std::string_view param) const {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].name == param) return int(i);
  return -1;
}

std::vector<Value> Signature::bind(const CallArgs& args) const {
  std::vector<Value> out(params_.size(), Value::null());
  const size_t npos = args.npos();
  size_t next = 0;  // next positional argument to place
  size_t max_positional = 0, min_positional = 0;
  bool has_varargs = false, varargs_given = false;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Param& p = params_[i];
    if (p.varargs) {
      has_varargs = true;
      varargs_given = next < npos;
      if (lone_sequence_varargs_ && npos - next == 1 && (args[next].is(Kind::Tuple) || args[next].is(Kind::List))) {
        out[i] = args[next++];
      } else {
        out[i] = make_tuple(std::vector<Value>(args.args + next, args.args + npos));
        next = npos;
      }
    } else if (!p.kwonly && !p.varkw) {
      ++max_positional;
      min_positional += p.has_default ? 0 : 1;
      if (next < npos) out[i] = args[next++];
    }
  }
  if (next < npos && !has_varargs) {
    std::string takes = min_positional == max_positional
                            ? std::to_string(max_positional) + " positional argument" + (max_positional == 1 ? "" : "s")
                            : "from " + std::to_string(min_positional) + " to " + std::to_string(max_positional) +
                                  " positional arguments";
    throw_error(ErrorKind::TypeError, fname_ + "() takes " + takes + " but " + std::to_string(npos) +
                                          (npos == 1 ? " was" : " were") + " given");
  }
  int varkw = -1;
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].varkw) {
      varkw = int(i);
      out[i] = make_dict();
    }
  for (size_t k = 0; k < args.nkw(); ++k) {
    const Value& key = args.kwnames->items[k];
    const std::string& name = key.as_str();
    const Value& v = args[npos + k];
    int idx = index_of(name);
    if (idx >= 0 && params_[size_t(idx)].posonly) {
      if (varkw >= 0) {
        out[size_t(varkw)].as<DictObj>()->set(key, v);
        continue;
      }
      // CPython's two wordings (Argument Clinic): all positional-only, or some.
      bool all_posonly = true;
      for (const Param& p : params_) all_posonly = all_posonly && (p.posonly || p.varargs);
      if (all_posonly) throw_error(ErrorKind::TypeError, fname_ + "() takes no keyword arguments");
      throw_error(ErrorKind::TypeError,
                  fname_ + "() got some positional-only arguments passed as keyword arguments: '" + name + "'");
    }
    // torch also accepts its `*size` by keyword: zeros(size=(2, 3)).
    bool by_keyword = idx >= 0 && !params_[size_t(idx)].varkw &&
                      (!params_[size_t(idx)].varargs || lone_sequence_varargs_);
    if (by_keyword) {
      if (params_[size_t(idx)].varargs && !varargs_given) out[size_t(idx)] = Value::null();
      if (!out[size_t(idx)].is_null())
        throw_error(ErrorKind::TypeError, fname_ + "() got multiple values for argument '" + name + "'");
      out[size_t(idx)] = v;
    } else if (varkw >= 0) {
      out[size_t(varkw)].as<DictObj>()->set(key, v);
    } else {
      throw_error(ErrorKind::TypeError, fname_ + "() got an unexpected keyword argument '" + name + "'");
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!out[i].is_null()) continue;
    if (!params_[i].has_default)
      throw_error(ErrorKind::TypeError, fname_ + "() missing required argument '" + params_[i].name + "'");
    out[i] = params_[i].default_value;
  }
  return out;
}

namespace {
struct NativeEntry {
  Signature sig;
  NativeFn fn;
  Kind self_kind = Kind::Null;  // a method's receiver kind (Null: a plain function)
  std::string type, method;     // for a method: its type's and its own name
  // A caller's Python list or dict argument is read into a native one
  // before the native runs (natives read containers, they do not keep or
  // mutate their arguments) -- except where the object itself must stay:
  // lazy iterators read it live, setattr stores it.
  bool reads_foreign = true;
};

bool keeps_its_arguments(std::string_view name) {
  return name == "iter" || name == "next" || name == "enumerate" || name == "zip" || name == "reversed" ||
         name == "setattr" || name == "map" || name == "filter" ||
         // methods that store an argument, or hand it back, as it is
         name == "list.append" || name == "list.insert" || name == "dict.setdefault" || name == "dict.get" ||
         name == "dict.pop";
}

bool has_foreign(const CallArgs& args, size_t from) {
  for (size_t i = from; i < args.nargs; ++i)
    if (args[i].is(Kind::Foreign)) return true;
  return false;
}
// Natives are created once at startup (builtins, module classes) and live
// for the process; a deque keeps their addresses stable.
std::deque<NativeEntry>& natives() {
  static auto* d = new std::deque<NativeEntry>();
  return *d;
}
Value native_trampoline(CallContext& ctx, const BuiltinObj& self, const CallArgs& args) {
  const NativeEntry& e = natives()[size_t(self.data)];
  if (e.self_kind != Kind::Null && args.npos() > 0 && !args[0].is(e.self_kind)) {
    const Value& recv = args[0];
    if (foreign_container(recv) == e.self_kind) {
      Value method = get_attr(ctx, recv, intern(e.method).get());
      return ctx.call(method, CallArgs{args.args + 1, args.nargs - 1, args.kwnames});
    }
    throw_error(ErrorKind::TypeError, "descriptor '" + e.method + "' for '" + e.type +
                                          "' objects doesn't apply to a '" + type_name(recv) + "' object");
  }
  const size_t first = e.self_kind != Kind::Null ? 1 : 0;  // a method's self is its own
  if (first == 0 && has_foreign(args, 0))
    if (const BigIntHooks* h = bigint_hooks())
      for (size_t i = 0; i < args.nargs; ++i)
        if (h->is_big(args[i])) {
          // abs(2**70), divmod(2**70, 3): the embedder's own builtin
          if (Value r = h->call_builtin(e.sig.name(), args); !r.is_null()) return r;
          break;
        }
  if (e.reads_foreign && has_foreign(args, first)) {
    std::vector<Value> native(args.args, args.args + args.nargs);
    for (size_t i = first; i < native.size(); ++i) native[i] = native_container(native[i]);
    Value r = e.fn(ctx, e.sig.bind(CallArgs{native.data(), native.size(), args.kwnames}));
    // An argument handed back (max(a, b), a default) is the caller's
    // object, not the copy read.
    for (size_t i = first; i < native.size(); ++i)
      if (r.is_same(native[i]) && !native[i].is_same(args[i])) return args[i];
    return r;
  }
  return e.fn(ctx, e.sig.bind(args));
}
}  // namespace

Value make_native(std::string name, std::string_view signature, NativeFn fn) {
  natives().push_back(NativeEntry{Signature(name, signature), fn, Kind::Null, {}, {}, !keeps_its_arguments(name)});
  return make_builtin(std::move(name), native_trampoline, int64_t(natives().size() - 1));
}

Value make_native_method(Kind self_kind, const std::string& type, const std::string& method,
                         std::string_view signature, NativeFn fn) {
  std::string name = type + "." + method;
  natives().push_back(NativeEntry{Signature(name, signature), fn, self_kind, type, method, !keeps_its_arguments(name)});
  return make_builtin(std::move(name), native_trampoline, int64_t(natives().size() - 1));
}

}  // namespace kiln::runtime
