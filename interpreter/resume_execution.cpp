// Resume functions: see resume_execution.h.
#include "interpreter/resume_execution.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "interpreter/code_builder.h"

namespace kiln::interpreter {

using namespace kiln::runtime;

namespace {

struct ResumeOrigin {
  Ref<Code> original;
  size_t offset;  // instructions of prologue before the copied code
  size_t target;  // where it resumes, in the original's numbering
};
struct ResumeKey {
  const Code* original;
  size_t target;
  size_t nstack;
  std::vector<std::string> live;
  std::vector<Slot> slots;  // how each of the nstack slots crosses (missing: Slot::Value)
  bool operator<(const ResumeKey& o) const {
    return std::tie(original, target, nstack, live, slots) < std::tie(o.original, o.target, o.nstack, o.live, o.slots);
  }
};
std::mutex resume_mu;
std::map<const Code*, ResumeOrigin>& resume_origins() {
  static auto* m = new std::map<const Code*, ResumeOrigin>();
  return *m;
}
std::map<ResumeKey, Ref<FunctionObj>>& resume_cache() {
  static auto* m = new std::map<ResumeKey, Ref<FunctionObj>>();
  return *m;
}

// Copies `code`'s instructions into `b` from label `labels[i]` on,
// remapping operands through the builder.
void copy_code(CodeBuilder& b, const Code& code, const std::vector<CodeBuilder::Label>& labels) {
  for (size_t p = 0; p < code.instrs.size(); ++p) {
    const Instr& ins = code.instrs[p];
    b.bind(labels[p]);
    b.set_line(ins.line);
    const OpcodeInfo& info = opcode_info(ins.op);
    auto map = [&](OperandKind k, int32_t v) -> int32_t {
      switch (k) {
        case OperandKind::Const: return b.constant(code.consts[size_t(v)]);
        case OperandKind::Local: return *b.find_local(code.varnames[size_t(v)]);
        case OperandKind::Name: return b.name(code.names[size_t(v)]->s);
        default: return v;
      }
    };
    if (info.a == OperandKind::Jump) b.emit(ins.op, labels[size_t(ins.a)], map(info.b, ins.b));
    else b.emit(ins.op, map(info.a, ins.a), map(info.b, ins.b));
  }
}

// The exception table of `code`, over the labels copy_code bound: a
// resume function resumes inside the original's try blocks with their
// handlers (the prologue pushes exactly the saved stack, so the rows'
// depths hold). An end one past the last instruction gets its own label.
void copy_exception_table(CodeBuilder& b, const Code& code, const std::vector<CodeBuilder::Label>& labels) {
  if (code.exception_table.empty()) return;
  CodeBuilder::Label end = b.new_label();
  b.bind(end);
  auto at = [&](int32_t p) { return size_t(p) < labels.size() ? labels[size_t(p)] : end; };
  for (const ExceptionEntry& e : code.exception_table) b.handler(at(e.start), at(e.end), at(e.target), e.depth, e.lasti);
}

}  // namespace

bool is_stack_temp(const std::string& n) {
  for (const char* prefix : {"__stack", "__resume_arg", "__resume_cells", "__cell_value", "__target", "__contents", "__store_value", "__store_object", "__global_value", "__rebuilt", "__dict_contents", "__live", "__graph_out", "__return"})
    if (n.rfind(prefix, 0) == 0) return true;
  return false;
}


// `slots[i]`: how stack slot i crosses. A loop's iterator is passed as the
// list of its remaining items (a resumed trace can unroll a list; a live
// iterator object it could only treat as opaque). A NULL (a call pending
// across the break: `self.b(self.a(x))` breaking in self.a, with b's
// LOAD_METHOD pair under it) is no value a caller can pass: the prologue
// pushes it again, so the resumed CALL_METHOD sees CPython's stack shape.
Ref<FunctionObj> make_resume(const FunctionObj& fn, size_t target, size_t nstack, const std::vector<std::string>& live,
                             const std::vector<Slot>& slots) {
  const Code* code = fn.code.get();
  Ref<Code> original(const_cast<Code*>(code));
  size_t orig_target = target;
  {
    std::lock_guard<std::mutex> lock(resume_mu);
    auto it = resume_origins().find(code);
    if (it != resume_origins().end()) {
      original = it->second.original;
      orig_target = target - it->second.offset;
    }
    ResumeKey key{original.get(), orig_target, nstack, live, slots};
    auto hit = resume_cache().find(key);
    if (hit != resume_cache().end()) return hit->second;
  }
  const Code& orig = *original;
  CodeBuilder b(orig.name + "_resume_at_" + std::to_string(orig_target), orig.filename);
  b.set_qualname(orig.qualname + "_resume_at_" + std::to_string(orig_target));
  auto slot = [&](size_t i) { return i < slots.size() ? slots[i] : Slot::Value; };
  size_t nparams = 0;
  for (size_t i = 0; i < nstack; ++i) {
    if (slot(i) == Slot::Null) continue;
    b.arg("__stack" + std::to_string(nparams));
    if (at_position(slot(i))) b.arg("__stack" + std::to_string(nparams) + "_pos");
    ++nparams;
  }
  for (const std::string& n : live) b.arg(n);
  // The frame's cells (cellvars, then freevars) are the resume function's
  // closure, in the same order, so cell operands carry over unchanged: the
  // residual passes the very cells (resume_closure), and a closure made
  // before the break shares them with the resumed frame, as in Python.
  for (const std::string& n : orig.cellvars) b.freevar(n);
  for (const std::string& n : orig.freevars) b.freevar(n);
  for (const std::string& n : orig.varnames) b.local(n);
  std::vector<CodeBuilder::Label> labels;
  for (size_t p = 0; p < orig.instrs.size(); ++p) labels.push_back(b.new_label());
  b.set_line(orig.instrs[orig_target].line);
  for (size_t i = 0, k = 0; i < nstack; ++i) {
    if (slot(i) == Slot::Null) {
      b.emit(Opcode::PUSH_NULL);
      continue;
    }
    const std::string name = "__stack" + std::to_string(k++);
    b.emit(Opcode::LOAD_FAST, *b.find_local(name));
    if (slot(i) == Slot::Iterator) b.emit(Opcode::GET_ITER);
    if (at_position(slot(i))) emit_step_over(b, *b.find_local(name + "_pos"));
  }
  b.emit(Opcode::JUMP, labels[orig_target]);
  size_t offset = b.size();
  copy_code(b, orig, labels);
  copy_exception_table(b, orig, labels);
  Ref<Code> rc = b.finish();
  rc->continues = orig.qualname;
  rc->prologue = int32_t(offset);
  // Zero-argument super() reads the original's first argument, which
  // crossed as the live parameter of its name (runtime/value/code.h).
  if (orig.argcount == 0) {
    rc->first_arg_local = Code::kNoFirstArg;
  } else {
    auto it = std::find(live.begin(), live.end(), orig.varnames[0]);
    rc->first_arg_local = it == live.end() ? Code::kFirstArgGone : int32_t(nparams + size_t(it - live.begin()));
  }
  auto f = make_ref<FunctionObj>();
  f->code = rc;
  f->globals = fn.globals;
  // A resume function with a closure is made per call over that call's
  // cells (Residual::emit_resume_callee); only its code is used then.
  if (rc->freevars.empty()) f->closure = fn.closure;
  std::lock_guard<std::mutex> lock(resume_mu);
  resume_origins()[rc.get()] = {original, offset, orig_target};
  resume_cache()[ResumeKey{original.get(), orig_target, nstack, live, slots}] = f;
  return f;
}

// Under TOS, a list: replaces it by iter(list) advanced by local `pos`
// items (exhausted if the list has no more), as plain KBC so that a
// resumed trace unrolls it and the VM (or CPython, translated) runs it.
void emit_step_over(CodeBuilder& b, int32_t pos) {
  auto loop = b.new_label(), exhausted = b.new_label(), done = b.new_label();
  b.emit(Opcode::GET_ITER);
  b.bind(loop);
  b.emit(Opcode::LOAD_FAST, pos);
  b.emit(Opcode::LOAD_CONST, b.constant(Value::integer(0)));
  b.emit(Opcode::COMPARE_OP, int32_t(runtime::CmpOp::GT));
  b.emit(Opcode::POP_JUMP_IF_FALSE, done);
  b.emit(Opcode::FOR_ITER, exhausted);
  b.emit(Opcode::POP_TOP);
  b.emit(Opcode::LOAD_FAST, pos);
  b.emit(Opcode::LOAD_CONST, b.constant(Value::integer(1)));
  b.emit(Opcode::BINARY_OP, int32_t(runtime::BinOp::SUB));
  b.emit(Opcode::STORE_FAST, pos);
  b.emit(Opcode::JUMP, loop);
  b.bind(exhausted);  // FOR_ITER popped the iterator: an exhausted one in its place
  b.emit(Opcode::LOAD_CONST, b.constant(runtime::make_tuple({})));
  b.emit(Opcode::GET_ITER);
  b.bind(done);
}


// `code` is a resume function whose resumed instruction is pc.
bool resumes_at(const Code& code, size_t pc) {
  std::lock_guard<std::mutex> lock(resume_mu);
  auto it = resume_origins().find(&code);
  return it != resume_origins().end() && it->second.offset + it->second.target == pc;
}

void reset_resume_functions() {
  std::lock_guard<std::mutex> lock(resume_mu);
  resume_cache().clear();
  resume_origins().clear();
}

}  // namespace kiln::interpreter
