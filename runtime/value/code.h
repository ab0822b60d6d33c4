// KBC code objects and the tables derived from opcodes.def / operators.def.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/value/value.h"

namespace kiln::runtime {

enum class Opcode : uint8_t {
#define KILN_OPCODE(name, ...) name,
#include "runtime/value/opcodes.def"
#undef KILN_OPCODE
};
constexpr int kNumOpcodes = 0
#define KILN_OPCODE(name, ...) +1
#include "runtime/value/opcodes.def"
#undef KILN_OPCODE
    ;
static_assert(kNumOpcodes <= 256, "opcodes are stored in one byte");

enum class OperandKind : uint8_t { None, Const, Local, Name, Deref, Count, Jump, BinOp, CmpOp, UnOp, Flags };
enum class Flow : uint8_t { Next, Jump, Branch, Return, Raise };

enum class BinOp : uint8_t {
#define KILN_BINOP(e, sym, op) e,
#include "runtime/value/operators.def"
#undef KILN_BINOP
};
enum class CmpOp : uint8_t {
#define KILN_CMPOP(e, sym, op) e,
#include "runtime/value/operators.def"
#undef KILN_CMPOP
};
enum class UnOp : uint8_t {
#define KILN_UNOP(e, sym, op) e,
#include "runtime/value/operators.def"
#undef KILN_UNOP
};
int num_binops();
int num_cmpops();
int num_unops();
const char* binop_symbol(BinOp op);
const char* cmpop_symbol(CmpOp op);
// `a op b` as `b op' a`: Python's reflection of a comparison (< and >,
// <= and >=; the others are their own).
CmpOp reflected_cmpop(CmpOp op);
const char* unop_symbol(UnOp op);
std::optional<BinOp> binop_from_symbol(std::string_view s);
std::optional<CmpOp> cmpop_from_symbol(std::string_view s);
std::optional<UnOp> unop_from_symbol(std::string_view s);

struct OpcodeInfo {
  const char* name;
  OperandKind a, b;
  Flow flow;
  bool may_break;
};
const OpcodeInfo& opcode_info(Opcode op);
std::optional<Opcode> opcode_from_name(std::string_view name);
// Stack effects, derived from the table's expressions.
int opcode_pops(Opcode op, int32_t a, int32_t b);
int opcode_pushes(Opcode op, int32_t a, int32_t b);
int opcode_jump_pops(Opcode op, int32_t a, int32_t b);
int opcode_jump_pushes(Opcode op, int32_t a, int32_t b);

struct Instr {
  Opcode op = Opcode::NOP;
  int32_t a = 0;
  int32_t b = 0;
  int32_t line = 0;  // user's source line
};

// One row of a function's exception table (CPython 3.11's model): a raise
// at an instruction in [start, end) unwinds the stack to `depth` items,
// pushes the instruction's index if `lasti`, pushes the exception and
// jumps to `target`. The first row (in table order) covering an
// instruction is its handler; the verifier checks the rows (docs/kbc.md).
struct ExceptionEntry {
  int32_t start = 0, end = 0;
  int32_t target = 0;
  int32_t depth = 0;
  bool lasti = false;
  bool operator==(const ExceptionEntry& o) const {
    return start == o.start && end == o.end && target == o.target && depth == o.depth && lasti == o.lasti;
  }
};

enum CodeFlags : uint32_t {
  kVarArgs = 1,  // *args: a tuple local right after the positional and kw-only params
  kVarKw = 2,    // **kwargs: a dict local after that
  // `.generator`: calling it makes a generator over the body (YIELD_VALUE
  // suspends it). The tracer's view of a Python generator function; the
  // VM has no generators and raises at the call.
  kGenerator = 4,
};

// A compiled function body. Immutable once verified (the VM and tracer read
// it concurrently with nothing else).
struct Code final : Object {
  std::string name;
  std::string qualname;  // e.g. "MLP.forward"
  std::string filename;
  int32_t argcount = 0;        // positional parameters, first in varnames
  int32_t posonlyargcount = 0; // the first of them that cannot be passed by keyword (before `/`)
  int32_t kwonlyargcount = 0;  // keyword-only parameters, after them
  uint32_t flags = 0;          // CodeFlags
  int32_t first_line = 0;
  std::vector<std::string> varnames;  // parameters, then other locals
  std::vector<std::string> cellvars;  // locals captured by inner functions
  std::vector<std::string> freevars;  // captured from the enclosing function
  std::vector<Ref<StrObj>> names;     // globals and attribute names (interned)
  std::vector<Value> consts;
  std::vector<Instr> instrs;
  std::vector<ExceptionEntry> exception_table;

  // Filled by the verifier (interpreter/verifier): only verified code runs.
  int32_t max_stack = -1;
  bool verified = false;
  // For each cellvar, the parameter it is initialised from, or -1.
  std::vector<int32_t> cell_from_arg;
  // The local holding the function's first argument, which a zero-argument
  // super() reads (CPython reads local 0): 0, except in a resume function,
  // whose first parameters are the saved stack (interpreter/convert_frame);
  // kNoFirstArg: the original function takes no positional argument;
  // kFirstArgGone: it had one, but it did not cross the graph break.
  static constexpr int32_t kNoFirstArg = -1, kFirstArgGone = -2;
  int32_t first_arg_local = 0;

  // A resume function, or the residual of one, continues a user frame that
  // the original function's residual already stands for; `continues` is
  // that frame's qualname (empty for any other code). The VM counts such a
  // frame neither toward the recursion limit nor as a traceback entry of
  // its own, so a compiled call recurses exactly as deep as the VM before
  // RecursionError (found by tests/fuzz), and its traceback names the
  // user's function, not a resume function. Set by make_resume; a residual
  // copies it from the code it stands for.
  std::string continues;
  // The name a user sees for this frame (tracebacks, the VM's own errors).
  const std::string& user_qualname() const { return continues.empty() ? qualname : continues; }
  // Instructions a resume function runs before its copy of the user's code
  // (its prologue): a handler's lasti counts from the user's first
  // instruction, so a program sees the numbers of the function it wrote
  // (a fuzz finding, tests/fuzz/README.md defect 26).
  int32_t prologue = 0;

  // The VM's inline caches, one per instruction, made on first use. An
  // attribute load on a module remembers which dict slot answered it, keyed
  // by (module, version): versions are globally unique and bumped by every
  // structural change, so a hit can never be stale. Mutable: filling a
  // cache does not change what the code means.
  struct AttrCache {
    const void* module = nullptr;
    uint64_t version = 0;
    const Value* slot = nullptr;
  };
  mutable std::vector<AttrCache> attr_caches;  // raw pointers: no references

  void traverse(Visitor& v) const override {
    for (const Ref<StrObj>& n : names) visit(v, n);
    visit(v, consts);
  }

  int32_t nparams() const {
    return argcount + kwonlyargcount + ((flags & kVarArgs) ? 1 : 0) + ((flags & kVarKw) ? 1 : 0);
  }
  int32_t ncells() const { return int32_t(cellvars.size() + freevars.size()); }
  // The handler row covering instruction pc, or null.
  const ExceptionEntry* handler_for(size_t pc) const {
    for (const ExceptionEntry& e : exception_table)
      if (int32_t(pc) >= e.start && int32_t(pc) < e.end) return &e;
    return nullptr;
  }
  int line_of(size_t pc) const { return pc < instrs.size() ? instrs[pc].line : first_line; }
};

}  // namespace kiln::runtime
