#include "interpreter/verifier.h"

#include <algorithm>
#include <unordered_set>

namespace kiln::interpreter {

using runtime::Code;
using runtime::Flow;
using runtime::Instr;
using runtime::Kind;
using runtime::Opcode;
using runtime::OperandKind;

namespace {

const char* operand_kind_noun(OperandKind k) {
  switch (k) {
    case OperandKind::None: return "unused operand";
    case OperandKind::Const: return "constant index";
    case OperandKind::Local: return "local index";
    case OperandKind::Name: return "name index";
    case OperandKind::Deref: return "cell index";
    case OperandKind::Count: return "count";
    case OperandKind::Jump: return "jump target";
    case OperandKind::BinOp: return "binary operator";
    case OperandKind::CmpOp: return "comparison operator";
    case OperandKind::UnOp: return "unary operator";
    case OperandKind::Flags: return "flags";
  }
  return "operand";
}

class Verifier {
 public:
  Verifier(Code& code, std::unordered_set<const Code*>& in_progress) : code_(code), in_progress_(in_progress) {}

  void run() {
    check_header();
    for (size_t pc = 0; pc < code_.instrs.size(); ++pc) check_operands(pc);
    check_exception_table();
    int32_t max_stack = flow();
    fill_cells();
    verify_nested();
    code_.max_stack = max_stack;
    code_.verified = true;
  }

 private:
  [[noreturn]] void fail_function(const std::string& what) const {
    throw_error(ErrorKind::VerifyError, "function '" + function_name() + "': " + what);
  }
  [[noreturn]] void fail_at(size_t pc, const std::string& what) const {
    const Instr& ins = code_.instrs[pc];
    throw_error(ErrorKind::VerifyError, "function '" + function_name() + "', instruction " +
                                            std::to_string(pc) + " (" + opname(ins) + "), line " +
                                            std::to_string(ins.line) + ": " + what);
  }
  std::string function_name() const { return code_.qualname.empty() ? code_.name : code_.qualname; }
  static std::string opname(const Instr& ins) {
    if (size_t(ins.op) >= size_t(runtime::kNumOpcodes)) return "opcode " + std::to_string(int(ins.op));
    return runtime::opcode_info(ins.op).name;
  }

  // The frame layout: parameter counts and variable names.
  void check_header() {
    const Code& c = code_;
    if (c.argcount < 0 || c.kwonlyargcount < 0 || c.posonlyargcount < 0) fail_function("negative parameter count");
    if (c.posonlyargcount > c.argcount)
      fail_function(std::to_string(c.posonlyargcount) + " positional-only parameters but only " +
                    std::to_string(c.argcount) + " positional ones");
    if (c.flags & ~uint32_t(runtime::kVarArgs | runtime::kVarKw | runtime::kGenerator))
      fail_function("unknown code flags " + std::to_string(c.flags));
    if (size_t(c.nparams()) > c.varnames.size())
      fail_function(std::to_string(c.nparams()) + " parameters but only " + std::to_string(c.varnames.size()) +
                    " local names");
    check_unique(c.varnames, "local");
    std::vector<std::string> derefs = c.cellvars;
    derefs.insert(derefs.end(), c.freevars.begin(), c.freevars.end());
    check_unique(derefs, "cell or free variable");
    for (size_t i = 0; i < c.names.size(); ++i)
      if (!c.names[i]) fail_function("name " + std::to_string(i) + " is null");
    for (size_t i = 0; i < c.consts.size(); ++i)
      if (c.consts[i].is_null()) fail_function("constant " + std::to_string(i) + " is NULL");
    if (c.instrs.empty()) fail_function("no instructions (execution falls off the end)");
  }
  void check_unique(const std::vector<std::string>& names, const char* what) {
    std::unordered_set<std::string> seen;
    for (const auto& n : names)
      if (!seen.insert(n).second) fail_function(std::string("duplicate ") + what + " '" + n + "'");
  }

  void check_operands(size_t pc) {
    const Instr& ins = code_.instrs[pc];
    if (size_t(ins.op) >= size_t(runtime::kNumOpcodes)) fail_at(pc, "unknown opcode");
    const auto& info = runtime::opcode_info(ins.op);
    check_operand(pc, info.a, ins.a, "a");
    check_operand(pc, info.b, ins.b, "b");
    check_specific(pc, ins);
  }

  void check_operand(size_t pc, OperandKind kind, int32_t v, const char* which) {
    auto in_range = [&](size_t n, const char* what) {
      if (v < 0 || size_t(v) >= n)
        fail_at(pc, std::string(operand_kind_noun(kind)) + " " + std::to_string(v) + " out of range (" + what +
                        " has " + std::to_string(n) + ")");
    };
    switch (kind) {
      // A non-zero unused operand would not survive the disassembler.
      case OperandKind::None:
        if (v != 0) fail_at(pc, std::string("operand ") + which + " must be 0, is " + std::to_string(v));
        return;
      case OperandKind::Const: return in_range(code_.consts.size(), "the constant table");
      case OperandKind::Local: return in_range(code_.varnames.size(), "the local table");
      case OperandKind::Name: return in_range(code_.names.size(), "the name table");
      case OperandKind::Deref: return in_range(size_t(code_.ncells()), "the cell table");
      case OperandKind::Jump:
        if (v < 0 || size_t(v) >= code_.instrs.size())
          fail_at(pc, "jump target " + std::to_string(v) + " out of range (function has " +
                          std::to_string(code_.instrs.size()) + " instructions)");
        return;
      case OperandKind::BinOp: return in_range(size_t(runtime::num_binops()), "the operator table");
      case OperandKind::CmpOp: return in_range(size_t(runtime::num_cmpops()), "the operator table");
      case OperandKind::UnOp: return in_range(size_t(runtime::num_unops()), "the operator table");
      case OperandKind::Count:
        if (v < 0 || v > kMaxCountOperand)
          fail_at(pc, "count " + std::to_string(v) + " out of range (0.." + std::to_string(kMaxCountOperand) + ")");
        return;
      case OperandKind::Flags:
        if (v < 0) fail_at(pc, "negative flags " + std::to_string(v));
        return;
    }
  }

  // Ranges the operand kind alone does not capture: each is the set of
  // values the VM implements for that opcode.
  void check_specific(size_t pc, const Instr& ins) {
    auto range = [&](int32_t v, int32_t lo, int32_t hi, const char* what) {
      if (v < lo || v > hi)
        fail_at(pc, std::string(what) + " " + std::to_string(v) + " out of range (" + std::to_string(lo) + ".." +
                        std::to_string(hi) + ")");
    };
    const auto& info = runtime::opcode_info(ins.op);
    // The augmented (`+=`) flag of a binary operator is one bit.
    if (info.a == OperandKind::BinOp && info.b == OperandKind::Flags) range(ins.b, 0, 1, "in-place flag");
    switch (ins.op) {
      case Opcode::BUILD_SLICE: range(ins.a, 2, 3, "slice argument count"); break;
      case Opcode::SWAP: range(ins.a, 2, kMaxCountOperand, "swap depth"); break;
      case Opcode::COPY: range(ins.a, 1, kMaxCountOperand, "copy depth"); break;
      // The container these name sits under TOS: depth 0 would be TOS itself.
      case Opcode::LIST_APPEND:
      case Opcode::LIST_EXTEND:
      case Opcode::SET_ADD:
      case Opcode::SET_UPDATE:
      case Opcode::DICT_MERGE: range(ins.a, 1, kMaxCountOperand, "container depth"); break;
      case Opcode::RAISE: range(ins.a, 0, 2, "raise argument count"); break;
      case Opcode::YIELD_VALUE:
        if (!(code_.flags & runtime::kGenerator)) fail_at(pc, "YIELD_VALUE outside a .generator function");
        break;
      case Opcode::MAKE_FUNCTION: range(ins.a, 0, 7, "function flags"); break;
      case Opcode::CALL_EX: range(ins.a, 0, 1, "call flags"); break;
      case Opcode::FORMAT_VALUE: range(ins.a, 0, 7, "format flags"); break;
      case Opcode::CALL_KW:
      case Opcode::CALL_METHOD_KW: check_kwnames(pc, ins); break;
      case Opcode::IMPORT_NAME:
        if (!code_.consts[size_t(ins.a)].is(Kind::Str)) fail_at(pc, "IMPORT_NAME's module name must be a str constant");
        break;
      default: break;
    }
  }

  [[noreturn]] void fail_handler(size_t i, const std::string& what) const {
    fail_function("exception handler " + std::to_string(i) + ": " + what);
  }
  // Each row's range and target lie on instructions (end may be one past
  // the last); depths are checked by flow().
  void check_exception_table() {
    const auto n = int64_t(code_.instrs.size());
    for (size_t i = 0; i < code_.exception_table.size(); ++i) {
      const auto& e = code_.exception_table[i];
      if (e.start < 0 || e.start >= n || e.end <= e.start || e.end > n)
        fail_handler(i, "range " + std::to_string(e.start) + ".." + std::to_string(e.end) +
                            " is not a non-empty range of instructions (function has " + std::to_string(n) + ")");
      if (e.target < 0 || e.target >= n)
        fail_handler(i, "target " + std::to_string(e.target) + " out of range (function has " + std::to_string(n) +
                            " instructions)");
      if (e.depth < 0 || e.depth > kMaxStackDepth) fail_handler(i, "depth " + std::to_string(e.depth) + " out of range");
    }
  }

  void check_kwnames(size_t pc, const Instr& ins) {
    const runtime::Value& names = code_.consts[size_t(ins.b)];
    if (!names.is(Kind::Tuple)) fail_at(pc, "keyword names must be a tuple of str constant");
    const auto& items = names.as<runtime::TupleObj>()->items;
    for (const auto& item : items)
      if (!item.is(Kind::Str)) fail_at(pc, "keyword names must be a tuple of str constant");
    if (items.size() > size_t(ins.a))
      fail_at(pc, std::to_string(items.size()) + " keyword names for " + std::to_string(ins.a) + " arguments");
  }

  // ---- the abstract stack ------------------------------------------------
  //
  // Beside each depth, flow() knows a little about what each stack slot
  // holds: whether it may be the NULL of a method call (LOAD_METHOD's
  // second slot, PUSH_NULL), and for closures, a cell (LOAD_CLOSURE), a
  // constant (LOAD_CONST) or a tuple of known size (BUILD_TUPLE). That is
  // enough to reject, before anything runs, the two things the VM and the
  // tracer cannot survive: a NULL used as a value (only CALL_METHOD's self
  // slot may hold one, and stack shuffles may move it), and MAKE_FUNCTION
  // wrapping a known code constant in a closure of the wrong size.
  //
  // Stacks are persistent lists (a node per push, sharing their tails), so
  // keeping one per instruction costs what the pushes cost, not depth times
  // instructions. A slot only ever widens (a known constant to "a value",
  // NULL-or-not to "maybe NULL"), so the fixpoint is reached in a few
  // visits per instruction.
  enum class Null : uint8_t { No, Yes, Maybe };
  enum class What : uint8_t { Value, Cell, Const, Tuple };
  struct Slot {
    What what = What::Value;
    Null null = Null::No;
    int32_t n = 0;     // the constant's index, or the tuple's size
    int32_t from = 0;  // the instruction that pushed it (for messages)
    bool operator==(const Slot&) const = default;
  };
  struct Node {
    Slot slot;
    int32_t next;  // index into nodes_, -1 = the empty stack
  };
  static Slot value_slot(size_t pc) { return Slot{What::Value, Null::No, 0, int32_t(pc)}; }
  static Slot join_slot(const Slot& a, const Slot& b) {
    if (a == b) return a;
    Slot j = a;
    if (a.what != b.what || a.n != b.n) {
      j.what = What::Value;
      j.n = 0;
    }
    if (a.null != b.null) j.null = Null::Maybe;
    if (a.null == Null::No && b.null != Null::No) j.from = b.from;  // name the NULL in messages
    return j;
  }
  int32_t push_slot(int32_t top, const Slot& s) {
    nodes_.push_back(Node{s, top});
    return int32_t(nodes_.size() - 1);
  }
  // The top `n` slots of `top`, deepest first; `rest` gets what is under them.
  std::vector<Slot> take(int32_t top, size_t n, int32_t& rest) const {
    std::vector<Slot> out(n);
    for (size_t i = n; i-- > 0;) {
      out[i] = nodes_[size_t(top)].slot;
      top = nodes_[size_t(top)].next;
    }
    rest = top;
    return out;
  }
  int32_t drop(int32_t top, size_t n) const {
    for (size_t i = 0; i < n; ++i) top = nodes_[size_t(top)].next;
    return top;
  }
  // The join of two stacks of one depth; `changed` says whether it differs
  // from `a` (then it is a new list over their common tail).
  int32_t join(int32_t a, int32_t b, bool& changed) {
    std::vector<Slot> joined;
    int32_t x = a, y = b;
    changed = false;
    while (x != y) {
      const Slot& sa = nodes_[size_t(x)].slot;
      Slot j = join_slot(sa, nodes_[size_t(y)].slot);
      if (!(j == sa)) changed = true;
      joined.push_back(j);
      x = nodes_[size_t(x)].next;
      y = nodes_[size_t(y)].next;
    }
    if (!changed) return a;
    for (size_t i = joined.size(); i-- > 0;) x = push_slot(x, joined[i]);
    return x;
  }

  // An item the instruction uses as a value must not be a method call's NULL.
  // `pos` counts from the top of the stack (1 = TOS).
  void require_value(size_t pc, const Slot& s, size_t pos) const {
    if (s.null == Null::No) return;
    const Instr& origin = code_.instrs[size_t(s.from)];
    fail_at(pc, std::string("stack item ") + std::to_string(pos) + " (1 = top) " +
                    (s.null == Null::Yes ? "is" : "may be") + " the NULL of a method call, pushed by instruction " +
                    std::to_string(s.from) + " (" + opname(origin) +
                    "), used as a value: only CALL_METHOD's self slot may hold it");
  }

  // MAKE_FUNCTION of a code constant: its closure must have one cell per
  // free variable (the VM checks it again for closures built elsewhere).
  void check_make_function(size_t pc, const Instr& ins, const std::vector<Slot>& in) const {
    const Slot& code_slot = in.back();
    if (code_slot.what != What::Const) return;
    const runtime::Value& c = code_.consts[size_t(code_slot.n)];
    if (!c.is(Kind::Code)) fail_at(pc, "the function's code is constant " + std::to_string(code_slot.n) + ", not a code object");
    const Code* inner = c.as<Code>();
    const size_t nfree = inner->freevars.size();
    const std::string who = "'" + (inner->qualname.empty() ? inner->name : inner->qualname) + "' has " +
                            std::to_string(nfree) + " free variable(s)";
    if (!(ins.a & 4)) {
      if (nfree) fail_at(pc, "no closure (flag 4) but " + who);
      return;
    }
    const Slot& closure = in[in.size() - 2];
    if (closure.what == What::Tuple && size_t(closure.n) != nfree)
      fail_at(pc, "a closure of " + std::to_string(closure.n) + " cell(s) but " + who);
    if (closure.what == What::Const || closure.what == What::Cell)
      fail_at(pc, "the closure is not a tuple of cells (pushed by instruction " + std::to_string(closure.from) + ")");
  }

  // What instruction `pc` does to the abstract stack on its fall-through
  // edge: checks the items it uses and returns the stack it leaves.
  int32_t transfer(size_t pc, int32_t top, int64_t pops) {
    const Instr& ins = code_.instrs[pc];
    int32_t rest = -1;
    std::vector<Slot> in = take(top, size_t(pops), rest);
    const size_t n = in.size();
    auto all_values = [&] {
      for (size_t k = 0; k < n; ++k) require_value(pc, in[k], n - k);
    };
    std::vector<Slot> out;
    switch (ins.op) {
      // Stack shuffles may move a NULL; they never use it.
      case Opcode::POP_TOP: break;
      case Opcode::COPY:
        out = in;
        out.push_back(in[0]);
        break;
      case Opcode::SWAP:
        out = in;
        std::swap(out.front(), out.back());
        break;
      case Opcode::LOAD_CONST: out.push_back(Slot{What::Const, Null::No, ins.a, int32_t(pc)}); break;
      case Opcode::LOAD_CLOSURE: out.push_back(Slot{What::Cell, Null::No, 0, int32_t(pc)}); break;
      case Opcode::PUSH_NULL: out.push_back(Slot{What::Value, Null::Yes, 0, int32_t(pc)}); break;
      case Opcode::LOAD_METHOD:
        all_values();
        out = {value_slot(pc), Slot{What::Value, Null::Maybe, 0, int32_t(pc)}};
        break;
      case Opcode::BUILD_TUPLE:
        all_values();
        out.push_back(Slot{What::Tuple, Null::No, ins.a, int32_t(pc)});
        break;
      // method self-or-NULL args...
      case Opcode::CALL_METHOD:
      case Opcode::CALL_METHOD_KW:
        for (size_t k = 0; k < n; ++k)
          if (k != 1) require_value(pc, in[k], n - k);
        out.push_back(value_slot(pc));
        break;
      // The container a items under TOS, and TOS; what lies between stays.
      case Opcode::LIST_APPEND:
      case Opcode::LIST_EXTEND:
      case Opcode::SET_ADD:
      case Opcode::SET_UPDATE:
        require_value(pc, in[0], n);
        require_value(pc, in[n - 1], 1);
        out.assign(in.begin(), in.end() - 1);
        break;
      // callable _ dict ... mapping: the callable is read for its name.
      case Opcode::DICT_MERGE:
        require_value(pc, in[0], n);
        require_value(pc, in[2], n - 2);
        require_value(pc, in[n - 1], 1);
        out.assign(in.begin(), in.end() - 1);
        break;
      case Opcode::MAKE_FUNCTION:
        all_values();
        check_make_function(pc, ins, in);
        out.push_back(value_slot(pc));
        break;
      default: {
        all_values();
        // Instructions that leave (part of) what they read in place.
        int64_t pushes = runtime::opcode_pushes(ins.op, ins.a, ins.b);
        size_t kept = 0;
        if (ins.op == Opcode::FOR_ITER || ins.op == Opcode::CHECK_EXC_MATCH) kept = 1;
        if (ins.op == Opcode::WITH_EXCEPT_START) kept = 4;
        out.assign(in.begin(), in.begin() + ptrdiff_t(kept));
        while (int64_t(out.size()) < pushes) out.push_back(value_slot(pc));
        break;
      }
    }
    for (const Slot& s : out) rest = push_slot(rest, s);
    return rest;
  }

  // Worklist dataflow over instruction indices: depth_[pc] is the stack
  // depth on entry to pc (-1: not reached yet) and stack_[pc] the abstract
  // stack there. An instruction is visited when first reached and again
  // only when a later edge widens its abstract stack; every edge into it
  // must agree on the depth.
  int32_t flow() {
    const auto& instrs = code_.instrs;
    depth_.assign(instrs.size(), -1);
    stack_.assign(instrs.size(), -1);
    nodes_.clear();
    std::vector<size_t> work;
    std::vector<char> queued(instrs.size(), 0);
    int32_t max_depth = 0;
    auto reach = [&](size_t from, size_t to, int64_t d, int32_t st) {
      if (d > kMaxStackDepth)
        fail_at(from, "stack depth " + std::to_string(d) + " exceeds the limit of " + std::to_string(kMaxStackDepth));
      max_depth = std::max(max_depth, int32_t(d));
      if (depth_[to] < 0) {
        depth_[to] = int32_t(d);
        stack_[to] = st;
      } else if (depth_[to] != d) {
        fail_at(from, "stack depth mismatch at instruction " + std::to_string(to) + ": " + std::to_string(d) +
                          " on this path, " + std::to_string(depth_[to]) + " on another");
      } else {
        bool changed = false;
        stack_[to] = join(stack_[to], st, changed);
        if (!changed) return;
      }
      if (!queued[to]) {
        queued[to] = 1;
        work.push_back(to);
      }
    };
    depth_[0] = 0;
    work.push_back(0);
    queued[0] = 1;
    while (!work.empty()) {
      size_t pc = work.back();
      work.pop_back();
      queued[pc] = 0;
      const Instr& ins = instrs[pc];
      const auto& info = runtime::opcode_info(ins.op);
      int64_t d = depth_[pc];
      const int32_t st = stack_[pc];
      // Operands are range-checked, so these stay small (<= 2 * kMaxCountOperand + 2).
      int64_t pops = runtime::opcode_pops(ins.op, ins.a, ins.b);
      int64_t pushes = runtime::opcode_pushes(ins.op, ins.a, ins.b);
      if (d < pops) fail_at(pc, "stack underflow (needs " + std::to_string(pops) + ", has " + std::to_string(d) + ")");
      // COPY n reads n deep and pushes n+1 before popping n: the peak is
      // what the VM's stack must hold.
      int64_t peak = d - pops + pushes;
      const int32_t next_st = transfer(pc, st, pops);
      if (info.flow == Flow::Jump || info.flow == Flow::Branch) {
        int64_t jpops = runtime::opcode_jump_pops(ins.op, ins.a, ins.b);
        int64_t jpushes = runtime::opcode_jump_pushes(ins.op, ins.a, ins.b);
        if (d < jpops)
          fail_at(pc, "stack underflow on the jump (needs " + std::to_string(jpops) + ", has " + std::to_string(d) + ")");
        int32_t jst = drop(st, size_t(jpops));
        for (int64_t k = 0; k < jpushes; ++k) jst = push_slot(jst, value_slot(pc));
        reach(pc, size_t(ins.a), d - jpops + jpushes, jst);
      }
      if (info.flow == Flow::Next || info.flow == Flow::Branch) {
        if (pc + 1 >= instrs.size()) fail_at(pc, "execution falls off the end of the function");
        reach(pc, pc + 1, peak, next_st);
      }
      max_depth = std::max(max_depth, int32_t(std::min<int64_t>(peak, kMaxStackDepth)));
      // The exception edge: any instruction may raise. Its handler gets the
      // stack cut to the row's depth, which must be there to cut to.
      if (const runtime::ExceptionEntry* h = code_.handler_for(pc)) {
        if (h->depth > d)
          fail_at(pc, "exception handler depth " + std::to_string(h->depth) + " exceeds the stack depth " +
                          std::to_string(d) + " here");
        int32_t hst = drop(st, size_t(d - h->depth));
        if (h->lasti) hst = push_slot(hst, value_slot(pc));
        hst = push_slot(hst, value_slot(pc));
        reach(pc, size_t(h->target), int64_t(h->depth) + (h->lasti ? 1 : 0) + 1, hst);
      }
    }
    return max_depth;
  }

  void fill_cells() {
    code_.cell_from_arg.assign(code_.cellvars.size(), -1);
    auto nparams = size_t(code_.nparams());
    for (size_t i = 0; i < code_.cellvars.size(); ++i) {
      auto it = std::find(code_.varnames.begin(), code_.varnames.begin() + ptrdiff_t(nparams), code_.cellvars[i]);
      if (it != code_.varnames.begin() + ptrdiff_t(nparams)) code_.cell_from_arg[i] = int32_t(it - code_.varnames.begin());
    }
  }

  // Code constants (the bodies MAKE_FUNCTION will wrap). `in_progress_`
  // breaks cycles (a function whose constants reach back to itself).
  void verify_nested() {
    in_progress_.insert(&code_);
    for (const auto& v : code_.consts) {
      if (!v.is(Kind::Code)) continue;
      Code* inner = v.as<Code>();
      if (inner->verified || in_progress_.count(inner)) continue;
      Verifier(*inner, in_progress_).run();
    }
  }

  Code& code_;
  std::unordered_set<const Code*>& in_progress_;
  std::vector<int32_t> depth_;
  std::vector<int32_t> stack_;  // the abstract stack on entry to each instruction (a node index)
  std::vector<Node> nodes_;
};

}  // namespace

void verify(Code& code) {
  std::unordered_set<const Code*> in_progress;
  Verifier(code, in_progress).run();
}

}  // namespace kiln::interpreter
