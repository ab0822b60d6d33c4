// Exceptions inside a trace (Dynamo's exception handling in inlined
// frames): a raise at trace time -- a `raise` statement, or an error
// folding an operation (an IndexError subscripting, a KeyError) -- inside
// an inlined frame whose exception table covers the instruction goes to
// that handler, as the VM and CPython go: the stack cut to the row's
// depth, lasti if the row says so, the exception pushed. The handler's
// code is traced like any other: PUSH_EXC_INFO / POP_EXCEPT keep the
// exception being handled, CHECK_EXC_MATCH is answered now (the exception
// and the class are known), RERAISE raises again into the next handler.
// An error no inlined frame handles leaves the inlined calls as it is and
// breaks the graph at the root frame's step, where CPython raises it for
// real (and the root's own handlers, if any, catch it there): the root
// frame never enters a handler during a trace, since a break inside one
// would need a resume function that is inside that handler.
//
// Which errors: those CPython would raise at the same place. kiln's folds
// of Python operations raise CPython's kinds and messages (the VM's
// differential tests hold them to it); the RuntimeError family is also
// where kiln reports its own limits (shape checks, unsupported operations),
// so it, and the kinds that are never the program's (MemoryError,
// RecursionError, SystemError, the verifier's), break as before.
#include "interpreter/instruction_translator.h"

#include "runtime/base/error.h"
#include "runtime/semantics/exceptions.h"

namespace kiln::interpreter {

using namespace kiln::runtime;
namespace vars = kiln::variables;

namespace {

bool catchable(const Error& e) {
  const ErrorKind k = e.kind();
  return error_kind_is(k, ErrorKind::Exception) && !error_kind_is(k, ErrorKind::RuntimeError) &&
         k != ErrorKind::MemoryError && k != ErrorKind::SystemError && k != ErrorKind::VerifyError;
}

}  // namespace

bool InstructionTranslator::catch_in_trace(const Error& e) {
  if (!parent_ || !catchable(e)) return false;
  const ExceptionEntry* h = code_->handler_for(pc_);
  if (!h || stack_.size() < size_t(h->depth)) return false;
  VT caught = std::move(ctx_.raising);
  ctx_.raising = nullptr;
  if (!caught) {
    Error copy = e;
    caught = vars::make_constant(caught_exception(copy));
  }
  stack_.resize(size_t(h->depth));
  if (h->lasti) push(vars::make_constant(Value::integer(int64_t(pc_) - code_->prologue)));
  push(std::move(caught));
  pc_ = size_t(h->target);
  jumped_ = true;
  return true;
}

bool InstructionTranslator::caught_further_out(const Error& e) const {
  return catchable(e) && parent_ && parent_->in_traced_try();
}

bool InstructionTranslator::in_traced_try() const {
  for (const InstructionTranslator* t = this; t && t->parent_; t = t->parent_)
    if (t->code_->handler_for(t->pc_)) return true;
  return false;
}

namespace {

// The Python value of an exception or exception class the trace holds:
// a constant, a builtin class, or a Python class (an Opaque at a source);
// Null for anything else (an object made in the trace).
Value exception_operand(const VT& v) {
  switch (v->kind) {
    case VTKind::Constant:
    case VTKind::Builtin: return v->value;
    case VTKind::Opaque: return v->made ? Value::null() : v->value;
    default: return Value::null();
  }
}

}  // namespace

void InstructionTranslator::raise_traced(const VT& exc_vt, const Value& exc, const Value& cause, bool reraise) {
  // A class raised is instantiated by the raise: the handler gets that
  // instance (caught_exception), not the class.
  ctx_.raising = exception_class_kind(exc) || (exc.is(Kind::Foreign) && !exception_data(exc) &&
                                               exc.as<ForeignObj>()->vt->exception_match)
                     ? nullptr
                 : exc_vt->is(VTKind::Constant) ? exc_vt
                                                 : vars::make_constant(exc);  // the same object, now a known value
  if (reraise && is_exception(exc)) reraise_exception(exc);
  raise_exception(exc, cause);  // a Python exception object: raised through the Foreign seam
}

void InstructionTranslator::op_RAISE(const Instr& i) {
  // Nothing in the trace would catch it: the break (CPython raises it).
  if (!in_traced_try()) unsupported(BreakReason::raise, "");
  if (i.a == 0) {
    if (!handled_) unsupported(BreakReason::raise, "a bare raise outside this frame's handler");
    VT exc = realize(handled_);
    raise_traced(exc, exception_operand(exc), Value::null(), /*reraise=*/true);
  }
  VT exc = realize(stack_[stack_.size() - size_t(i.a)]);
  const Value value = exception_operand(exc);
  const Value cause = i.a == 2 ? exception_operand(realize(stack_.back())) : Value::null();
  if (value.is_null() || (i.a == 2 && cause.is_null())) unsupported(BreakReason::raise, "an exception kiln does not hold");
  raise_traced(exc, value, cause, /*reraise=*/false);
}

// Only an inlined frame reaches its handlers in a trace (catch_in_trace),
// so these break in the root frame, where tracing never reaches them:
// CPython runs the handler after the break.
void InstructionTranslator::op_PUSH_EXC_INFO(const Instr&) {
  if (!parent_) unsupported(BreakReason::exception_handling, "an exception handler");
  VT exc = pop();
  push(handled_ ? handled_ : vars::make_constant(Value::none()));
  handled_ = exc;
  push(std::move(exc));
}

void InstructionTranslator::op_POP_EXCEPT(const Instr&) {
  if (!parent_) unsupported(BreakReason::exception_handling, "an exception handler");
  VT prev = pop();
  handled_ = prev->is(VTKind::Constant) && prev->value.is_none() ? nullptr : prev;
}

void InstructionTranslator::op_CHECK_EXC_MATCH(const Instr&) {
  if (!parent_) unsupported(BreakReason::exception_handling, "an except clause");
  const Value exc = exception_operand(realize(stack_[stack_.size() - 2]));
  VT cls_vt = realize(stack_.back());
  Value cls = exception_operand(cls_vt);
  if (cls.is_null() && cls_vt->is(VTKind::Tuple)) {  // except (A, B):
    std::vector<Value> items;
    for (const VT& x : cls_vt->items) items.push_back(exception_operand(realize(x)));
    if (std::none_of(items.begin(), items.end(), [](const Value& x) { return x.is_null(); }))
      cls = make_tuple(std::move(items));
  }
  if (exc.is_null() || cls.is_null()) unsupported(BreakReason::exception_handling, "an except clause over " + cls_vt->str());
  const bool match = exception_matches(exc, cls);  // a TypeError for a non-class, as in CPython
  pop();
  push(vars::make_constant(Value::boolean(match)));
}

void InstructionTranslator::op_RERAISE(const Instr&) {
  if (!parent_) unsupported(BreakReason::exception_handling, "a re-raise");
  VT exc = realize(stack_.back());
  const Value value = exception_operand(exc);
  if (value.is_null()) unsupported(BreakReason::exception_handling, "a re-raise of an exception kiln does not hold");
  raise_traced(exc, value, Value::null(), /*reraise=*/true);
}

}  // namespace kiln::interpreter
