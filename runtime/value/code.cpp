#include "runtime/value/code.h"

#include <array>

namespace kiln::runtime {

namespace {
constexpr std::array<OpcodeInfo, kNumOpcodes> kOpcodeInfo = {{
#define KILN_OPCODE(name, oa, ob, pops, pushes, flow, jpops, jpushes, brk) \
  {#name, OperandKind::oa, OperandKind::ob, Flow::flow, brk},
#include "runtime/value/opcodes.def"
#undef KILN_OPCODE
}};

constexpr const char* kBinSym[] = {
#define KILN_BINOP(e, sym, op) sym,
#include "runtime/value/operators.def"
#undef KILN_BINOP
};
constexpr const char* kCmpSym[] = {
#define KILN_CMPOP(e, sym, op) sym,
#include "runtime/value/operators.def"
#undef KILN_CMPOP
};
constexpr const char* kUnSym[] = {
#define KILN_UNOP(e, sym, op) sym,
#include "runtime/value/operators.def"
#undef KILN_UNOP
};

template <size_t N>
std::optional<int> find_sym(const char* const (&table)[N], std::string_view s) {
  for (size_t i = 0; i < N; ++i)
    if (s == table[i]) return int(i);
  return std::nullopt;
}
}  // namespace

int num_binops() { return int(std::size(kBinSym)); }
int num_cmpops() { return int(std::size(kCmpSym)); }
int num_unops() { return int(std::size(kUnSym)); }
const char* binop_symbol(BinOp op) { return kBinSym[int(op)]; }
const char* cmpop_symbol(CmpOp op) { return kCmpSym[int(op)]; }
CmpOp reflected_cmpop(CmpOp op) {
  switch (op) {
    case CmpOp::LT: return CmpOp::GT;
    case CmpOp::LE: return CmpOp::GE;
    case CmpOp::GT: return CmpOp::LT;
    case CmpOp::GE: return CmpOp::LE;
    default: return op;
  }
}
const char* unop_symbol(UnOp op) { return kUnSym[int(op)]; }
std::optional<BinOp> binop_from_symbol(std::string_view s) {
  if (auto i = find_sym(kBinSym, s)) return BinOp(*i);
  return std::nullopt;
}
std::optional<CmpOp> cmpop_from_symbol(std::string_view s) {
  if (auto i = find_sym(kCmpSym, s)) return CmpOp(*i);
  return std::nullopt;
}
std::optional<UnOp> unop_from_symbol(std::string_view s) {
  if (auto i = find_sym(kUnSym, s)) return UnOp(*i);
  return std::nullopt;
}

const OpcodeInfo& opcode_info(Opcode op) { return kOpcodeInfo[size_t(op)]; }

std::optional<Opcode> opcode_from_name(std::string_view name) {
  for (size_t i = 0; i < kOpcodeInfo.size(); ++i)
    if (name == kOpcodeInfo[i].name) return Opcode(i);
  return std::nullopt;
}

// The a/b parameters are named so the table's expressions can use them.
int opcode_pops(Opcode op, [[maybe_unused]] int32_t a, [[maybe_unused]] int32_t b) {
  switch (op) {
#define KILN_OPCODE(name, oa, ob, pops, pushes, flow, jpops, jpushes, brk) \
  case Opcode::name: return (pops);
#include "runtime/value/opcodes.def"
#undef KILN_OPCODE
  }
  return 0;
}
int opcode_pushes(Opcode op, [[maybe_unused]] int32_t a, [[maybe_unused]] int32_t b) {
  switch (op) {
#define KILN_OPCODE(name, oa, ob, pops, pushes, flow, jpops, jpushes, brk) \
  case Opcode::name: return (pushes);
#include "runtime/value/opcodes.def"
#undef KILN_OPCODE
  }
  return 0;
}
int opcode_jump_pops(Opcode op, [[maybe_unused]] int32_t a, [[maybe_unused]] int32_t b) {
  switch (op) {
#define KILN_OPCODE(name, oa, ob, pops, pushes, flow, jpops, jpushes, brk) \
  case Opcode::name: return (jpops);
#include "runtime/value/opcodes.def"
#undef KILN_OPCODE
  }
  return 0;
}
int opcode_jump_pushes(Opcode op, [[maybe_unused]] int32_t a, [[maybe_unused]] int32_t b) {
  switch (op) {
#define KILN_OPCODE(name, oa, ob, pops, pushes, flow, jpops, jpushes, brk) \
  case Opcode::name: return (jpushes);
#include "runtime/value/opcodes.def"
#undef KILN_OPCODE
  }
  return 0;
}

}  // namespace kiln::runtime

namespace kiln::runtime {
namespace {
// Invariant of the table: an instruction has a jump target exactly when its
// flow can jump, so the verifier and the translator find every edge from
// the operand kind alone.
constexpr bool jumps_have_targets() {
  for (const auto& info : kOpcodeInfo) {
    bool jumps = info.flow == Flow::Jump || info.flow == Flow::Branch;
    if (jumps != (info.a == OperandKind::Jump)) return false;
    if (info.b == OperandKind::Jump) return false;
  }
  return true;
}
static_assert(jumps_have_targets(), "opcodes.def: FLOW Jump/Branch <=> operand a is a Jump target");
}  // namespace
}  // namespace kiln::runtime
