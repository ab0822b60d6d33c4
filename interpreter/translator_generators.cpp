// Generators in the trace (Dynamo's LocalGeneratorObjectVariable): a call
// of a `.generator` function (the tracer's view of a Python generator
// function, kiln/_frontend.py) makes an Iterator tracker whose body is a
// child translator that has not started. Whoever iterates it (a for loop,
// list(), zip(), next()) resumes that translator to its next YIELD_VALUE, so
// the body runs lazily, interleaved with its consumer, as CPython runs it:
// what the body reads is read when CPython would read it, and its effects
// land in the order CPython makes them.
//
// A generator cannot be rebuilt for CPython (there is no way to make a
// generator stopped at a given yield), so one must never reach a residual:
// the residual's reconstruct raises a break that restarts the trace just
// before the root frame's step that made the generator (Unsupported::
// restart_at), and CPython then makes the generator and runs it itself.
// A break inside a generator's body is the break of the step that advanced
// it, as a break inside an inlined call is the call's.
#include "interpreter/frame_cache.h"
#include "interpreter/instruction_translator.h"

#include "runtime/base/error.h"

namespace kiln::interpreter {

using namespace kiln::runtime;
namespace vars = kiln::variables;

namespace {

struct GeneratorFrame final : vars::SuspendedFrame {
  std::unique_ptr<InstructionTranslator> body;
  std::pair<const void*, const void*> frame_key;  // for the recursion check while it runs
  bool running = false;   // CPython's "generator already executing"
  bool finished = false;  // returned or raised: every later next() is StopIteration
};

}  // namespace

int64_t InstructionTranslator::root_step() const {
  const InstructionTranslator* t = this;
  while (t->parent_) t = t->parent_;
  return t->steps_;
}

VT InstructionTranslator::make_generator(FunctionObj* fn, std::vector<VT> locals, const VT& fn_vt,
                                         std::vector<VT> closure, const void* self_id) {
  const Code* code = fn->code.get();
  // KBC programs have no generators (the VM raises at the call): the break
  // lets it.
  if (!ctx_.python_frames)
    unsupported(BreakReason::untraced_object, code->qualname + "() makes a generator, which the VM does not run");
  auto g = std::make_shared<GeneratorFrame>();
  g->body = std::make_unique<InstructionTranslator>(ctx_, Ref<FunctionObj>(fn), std::move(locals), this, fn_vt,
                                                    std::move(closure));
  g->body->self_id_ = self_id;
  g->frame_key = {code, self_id};
  VT it = vars::make_lazy_iterator({}, nullptr, vars::LazyIteration::Generator);
  // Where the restart stops if this generator would reach a residual: the
  // root's step of the call that made it (the whole call, when an inlined
  // function made it).
  it->value = Value::integer(root_step());
  it->frame = std::move(g);
  return it;
}

bool InstructionTranslator::resume(const InstructionTranslator* by, VT& out) {
  // The frame that advances a generator is its caller for this stretch
  // (CPython's f_back): breaks and the recursion check walk up through it.
  parent_ = by;
  depth_ = by->depth_ + 1;
  run();
  if (!yielded_) return false;
  out = std::move(yielded_);
  yielded_ = nullptr;
  return true;
}

bool InstructionTranslator::resume_generator(const VT& it, VT& out) {
  auto* g = static_cast<GeneratorFrame*>(it->frame.get());
  if (!g) unsupported(BreakReason::resume_state, "a generator whose body the trace no longer holds");
  if (g->finished) return false;
  if (g->running) throw_error(ErrorKind::ValueError, "generator already executing");
  const Code& code = g->body->code();
  struct Running {
    GeneratorFrame& g;
    std::multiset<std::pair<const void*, const void*>>& active;
    std::multiset<std::pair<const void*, const void*>>::iterator at;
    ~Running() {
      g.running = false;
      active.erase(at);
    }
  } running{*g, ctx_.active_frames, ctx_.active_frames.insert(g->frame_key)};
  g->running = true;
  try {
    if (g->body->resume(this, out)) return true;
    g->finished = true;
    return false;
  } catch (Error& e) {
    g->finished = true;  // a generator that raised is done, as in CPython
    // PEP 479: a StopIteration leaving a generator's body is a RuntimeError.
    if (e.kind() == ErrorKind::StopIteration) throw_error(ErrorKind::RuntimeError, "generator raised StopIteration");
    throw;
  } catch (const Unsupported& u) {
    if (ctx_.python_frames && is_own_code(code.filename)) throw;
    std::string cause = u.cause.empty() ? break_reason_text(u.reason, u.detail) + " in " + code.qualname : u.cause;
    throw Unsupported{BreakReason::inlined_break, code.qualname + " (a generator)", std::move(cause), -1,
                      u.innermost(), u.where, u.missing_attribute};
  }
}

void InstructionTranslator::op_YIELD_VALUE(const Instr&) {
  // The verifier allows YIELD_VALUE only in `.generator` code, and such a
  // code's frame is only ever a generator's body (make_generator).
  yielded_ = pop();
  push(vars::make_constant(Value::none()));  // what it resumes with: iterated, never sent into
}

}  // namespace kiln::interpreter
