#include "runtime/semantics/exceptions.h"

#include <array>
#include <cerrno>

#include "runtime/base/hash.h"
#include "runtime/semantics/format.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::runtime {

namespace {

constexpr size_t kNumKinds = 0
#define KILN_ERROR_COUNT(kind, py, base) +1
    KILN_ERROR_KINDS(KILN_ERROR_COUNT)
#undef KILN_ERROR_COUNT
    ;

ExceptionData* data_of(void* h) { return static_cast<ExceptionData*>(h); }

std::string args_repr(const std::vector<Value>& args) {
  if (args.size() == 1) return "(" + repr(args[0]) + ")";
  std::string s = "(";
  for (size_t i = 0; i < args.size(); ++i) s += (i ? ", " : "") + repr(args[i]);
  return s + ")";
}

Value exc_getattr(void* h, std::string_view name) {
  ExceptionData* d = data_of(h);
  for (const auto& [k, v] : d->attrs)
    if (k == name) return v;
  if (!d->foreign.is_null()) {
    if (name == "__cause__" && !d->cause.is_none()) return d->cause;
    auto* f = d->foreign.as<ForeignObj>();
    return f->vt->getattr(f->handle, name);
  }
  if (name == "args") return make_tuple(d->args);
  if (name == "__class__") return exception_class(d->kind);
  if (name == "__cause__") return d->cause;
  if (name == "__context__" || name == "__traceback__") return Value::none();
  if (name == "__suppress_context__") return Value::boolean(!d->cause.is_none());
  if (name == "value" && d->kind == ErrorKind::StopIteration) return d->args.empty() ? Value::none() : d->args[0];
  if (name == "code" && d->kind == ErrorKind::SystemExit)
    return d->args.empty() ? Value::none() : d->args.size() == 1 ? d->args[0] : make_tuple(d->args);
  if ((name == "errno" || name == "strerror" || name == "filename" || name == "filename2") &&
      error_kind_is(d->kind, ErrorKind::OSError))
    return Value::none();
  if (name == "name" && (d->kind == ErrorKind::NameError || d->kind == ErrorKind::AttributeError ||
                         error_kind_is(d->kind, ErrorKind::ImportError)))
    return Value::none();
  throw_error(ErrorKind::AttributeError,
              "'" + std::string(error_kind_name(d->kind)) + "' object has no attribute '" + std::string(name) + "'");
}

void exc_setattr(void* h, std::string_view name, const Value& v) {
  ExceptionData* d = data_of(h);
  if (!d->foreign.is_null()) {
    auto* f = d->foreign.as<ForeignObj>();
    f->vt->setattr(f->handle, name, v);
    return;
  }
  if (name == "args") {
    d->args = to_vector(v);
    d->message = exception_message(d->kind, d->args);
    d->from_message = false;
    return;
  }
  if (name == "__cause__") {
    d->cause = v;
    return;
  }
  for (auto& [k, x] : d->attrs)
    if (k == name) {
      x = v;
      return;
    }
  d->attrs.emplace_back(std::string(name), v);
}

std::string exc_repr(void* h) {
  ExceptionData* d = data_of(h);
  if (!d->foreign.is_null()) return repr(d->foreign);
  return std::string(error_kind_name(d->kind)) + args_repr(d->args);
}

std::string exc_format(void* h, std::string_view spec) {
  ExceptionData* d = data_of(h);
  if (!d->foreign.is_null()) return format_value(d->foreign, spec);
  if (!spec.empty())
    throw_error(ErrorKind::TypeError,
                "unsupported format string passed to " + std::string(error_kind_name(d->kind)) + ".__format__");
  return d->message;
}


const std::array<ForeignVTable, kNumKinds>& vtables() {
  static const auto* t = [] {
    auto* a = new std::array<ForeignVTable, kNumKinds>();
    for (size_t i = 0; i < kNumKinds; ++i) {
      ForeignVTable& vt = (*a)[i];
      vt.type_name = error_kind_name(ErrorKind(i));
      vt.destroy = [](void* h) { delete data_of(h); };
      vt.getattr = exc_getattr;
      vt.setattr = exc_setattr;
      vt.repr = exc_repr;
      vt.hash = [](void* h) { return size_t(hash_pointer(h)); };
      vt.format = exc_format;
      vt.traverse = [](void* h, Visitor& v) {
        const ExceptionData* d = data_of(h);
        visit(v, d->args);
        visit(v, d->cause);
        visit(v, d->foreign);
        for (const auto& [name, x] : d->attrs) visit(v, x);
      };
      // `raise e from e`, `e.me = e`, an exception in its own args: cycles
      // through the exception alone.
      vt.clear = [](void* h) {
        ExceptionData* d = data_of(h);
        std::vector<Value> args;
        args.swap(d->args);
        std::vector<std::pair<std::string, Value>> attrs;
        attrs.swap(d->attrs);
        Value cause = std::move(d->cause), foreign = std::move(d->foreign);
        d->cause = Value::none();
        d->foreign = Value::null();
      };
    }
    return a;
  }();
  return *t;
}

Value exception_ctor(CallContext&, const BuiltinObj& self, const CallArgs& args) {
  if (args.nkw())
    throw_error(ErrorKind::TypeError, self.name + "() takes no keyword arguments");
  return make_exception(ErrorKind(self.data), std::vector<Value>(args.args, args.args + args.npos()));
}

const std::array<Value, kNumKinds>& classes() {
  static const auto* t = [] {
    auto* a = new std::array<Value, kNumKinds>();
    for (size_t i = 0; i < kNumKinds; ++i) {
      (*a)[i] = make_builtin(error_kind_name(ErrorKind(i)), exception_ctor, int64_t(i));
      (*a)[i].as<BuiltinObj>()->how = BuiltinHow::Fold;  // making an exception object acts on nothing
    }
    return a;
  }();
  return *t;
}

// The cause of `raise x from y`: an exception, an exception class
// (instantiated) or None; anything else is CPython's TypeError.
Value checked_cause(const Value& cause) {
  if (cause.is_none() || is_exception(cause)) return cause;
  if (auto k = exception_class_kind(cause)) return make_exception(*k, {});
  if (cause.is(Kind::Foreign) && cause.as<ForeignObj>()->vt->exception_match) return cause;
  throw_error(ErrorKind::TypeError, "exception causes must derive from BaseException");
}

}  // namespace

Value exception_class(ErrorKind k) { return classes()[size_t(k)]; }

std::optional<ErrorKind> exception_class_kind(const Value& v) {
  if (!v.is(Kind::Builtin) || v.as<BuiltinObj>()->fn != exception_ctor) return std::nullopt;
  return ErrorKind(v.as<BuiltinObj>()->data);
}

ExceptionData* exception_data(const Value& v) {
  if (!v.is(Kind::Foreign)) return nullptr;
  const auto* f = v.as<ForeignObj>();
  const auto& t = vtables();
  if (f->vt < t.data() || f->vt >= t.data() + t.size()) return nullptr;
  return data_of(f->handle);
}

std::string exception_message(ErrorKind k, const std::vector<Value>& args) {
  if (args.empty()) return "";
  if (args.size() == 1) return k == ErrorKind::KeyError ? repr(args[0]) : to_str(args[0]);
  return repr(make_tuple(args));
}

namespace {
// CPython's OSError(errno, ...) -> the subclass of that errno (PEP 3151).
ErrorKind os_error_kind(int64_t e) {
  switch (e) {
    case EAGAIN: case EALREADY: case EINPROGRESS: return ErrorKind::BlockingIOError;
    case ECHILD: return ErrorKind::ChildProcessError;
    case EPIPE: case ESHUTDOWN: return ErrorKind::BrokenPipeError;
    case ECONNABORTED: return ErrorKind::ConnectionAbortedError;
    case ECONNREFUSED: return ErrorKind::ConnectionRefusedError;
    case ECONNRESET: return ErrorKind::ConnectionResetError;
    case EEXIST: return ErrorKind::FileExistsError;
    case ENOENT: return ErrorKind::FileNotFoundError;
    case EINTR: return ErrorKind::InterruptedError;
    case EISDIR: return ErrorKind::IsADirectoryError;
    case ENOTDIR: return ErrorKind::NotADirectoryError;
    case EACCES: case EPERM: return ErrorKind::PermissionError;
    case ESRCH: return ErrorKind::ProcessLookupError;
    case ETIMEDOUT: return ErrorKind::TimeoutError;
    default: return ErrorKind::OSError;
  }
}
}  // namespace

Value make_exception(ErrorKind k, std::vector<Value> args) {
  auto* d = new ExceptionData;
  // OSError(errno, strerror[, filename[, winerror[, filename2]]]): the
  // errno's subclass, "[Errno e] strerror: 'filename'", args (errno, strerror).
  if (error_kind_is(k, ErrorKind::OSError) && args.size() >= 2 && args.size() <= 5) {
    if (k == ErrorKind::OSError && args[0].is(Kind::Int)) k = os_error_kind(args[0].as_int());
    const Value none = Value::none();
    const Value& filename = args.size() >= 3 ? args[2] : none;
    const Value& filename2 = args.size() == 5 ? args[4] : none;
    d->message = "[Errno " + to_str(args[0]) + "] " + to_str(args[1]);
    if (!filename.is_none()) {
      d->message += ": " + repr(filename);
      if (!filename2.is_none()) d->message += " -> " + repr(filename2);
    }
    d->attrs = {{"errno", args[0]}, {"strerror", args[1]}, {"filename", filename}, {"filename2", filename2}};
    if (!filename.is_none()) args.resize(2);  // CPython keeps the args unless a filename was given
  } else {
    d->message = exception_message(k, args);
  }
  d->kind = k;
  d->args = std::move(args);
  return Value::object(Kind::Foreign, make_ref<ForeignObj>(&vtables()[size_t(k)], d));
}

Value caught_exception(Error& e) {
  Value exc;
  if (e.exception) {
    exc = Value::object(Kind::Foreign, e.exception.get());
  } else {
    exc = make_exception(e.kind(), e.message().empty() ? std::vector<Value>{} : std::vector<Value>{Value::str(e.message())});
    ExceptionData* d = exception_data(exc);
    d->message = e.message();
    d->from_message = true;
    d->origin = e.origin;
    e.exception = Ref<Object>(exc.obj());
  }
  exception_data(exc)->traceback = e.traceback();
  return exc;
}

// The error an exception object raises as: its kind and str(), what it
// has been through, and itself.
[[noreturn]] static void throw_exception(const Value& exc, bool reraise) {
  ExceptionData* d = exception_data(exc);
  Error err(d->kind, d->message);
  err.set_traceback(d->traceback);
  err.origin = d->origin;
  err.exception = Ref<Object>(exc.obj());
  err.reraised = reraise;
  throw err;
}

void throw_key_error(const Value& key) { throw_exception(make_exception(ErrorKind::KeyError, {key}), false); }

void raise_exception(const Value& exc, const Value& cause) {
  if (auto k = exception_class_kind(exc)) raise_exception(make_exception(*k, {}), cause);
  if (ExceptionData* d = exception_data(exc)) {
    if (!cause.is_null()) {
      Value c = checked_cause(cause);
      if (!d->foreign.is_null()) {
        auto* f = d->foreign.as<ForeignObj>();
        f->vt->setattr(f->handle, "__cause__", c);
      }
      d->cause = c;
    }
    throw_exception(exc, false);
  }
  if (exc.is(Kind::Foreign)) {
    auto* f = exc.as<ForeignObj>();
    if (f->vt->raise_exception) {
      if (!cause.is_null()) f->vt->setattr(f->handle, "__cause__", checked_cause(cause));
      f->vt->raise_exception(f->handle);
    }
  }
  throw_error(ErrorKind::TypeError, "exceptions must derive from BaseException");
}

void reraise_exception(const Value& exc) {
  if (!is_exception(exc)) throw_error(ErrorKind::SystemError, "RERAISE of a value that is no exception");
  throw_exception(exc, true);
}

bool exception_matches(const Value& exc, const Value& cls) {
  if (cls.is(Kind::Tuple)) {
    // CPython checks every item is a class before matching any.
    for (const Value& c : cls.as<TupleObj>()->items)
      if (!exception_class_kind(c) && !(c.is(Kind::Foreign) && c.as<ForeignObj>()->vt->exception_match))
        throw_error(ErrorKind::TypeError, "catching classes that do not inherit from BaseException is not allowed");
    for (const Value& c : cls.as<TupleObj>()->items)
      if (exception_matches(exc, c)) return true;
    return false;
  }
  const auto k = exception_class_kind(cls);
  const bool foreign_cls = cls.is(Kind::Foreign) && cls.as<ForeignObj>()->vt->exception_match;
  if (!k && !foreign_cls)
    throw_error(ErrorKind::TypeError, "catching classes that do not inherit from BaseException is not allowed");
  ExceptionData* d = exception_data(exc);
  if (!d) return false;
  if (!d->foreign.is_null()) {
    auto* f = d->foreign.as<ForeignObj>();
    if (f->vt->exception_match) return f->vt->exception_match(f->handle, d->foreign, cls);
  }
  if (k) return error_kind_is(d->kind, *k);
  auto* f = cls.as<ForeignObj>();
  return f->vt->exception_match(f->handle, exc, cls);
}

bool exception_isinstance(const Value& obj, const Value& cls) {
  if (!is_exception(obj)) return false;
  return exception_matches(obj, cls);
}

}  // namespace kiln::runtime
