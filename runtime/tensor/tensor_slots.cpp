// Tensors as Python's semantics see them (semantics/kind_slots.h): the
// registry op behind each operator, indexing, methods and the op builtins,
// filled into TensorSlots when this library is linked.
#include <string_view>

#include "runtime/semantics/census.h"
#include "runtime/semantics/kind_slots.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/tensor_index.h"

namespace kiln::runtime {

// value/operators.def names a registry op per operator (or `none`).
namespace op_index {
#define KILN_OP(name, ...) constexpr int name = int(OpId::name);
#include "runtime/tensor/ops.def"
#undef KILN_OP
constexpr int none = -1;
}  // namespace op_index

int tensor_op_for(BinOp op) {
  static const int table[] = {
#define KILN_BINOP(e, sym, opname) op_index::opname,
#include "runtime/value/operators.def"
#undef KILN_BINOP
  };
  return table[int(op)];
}
int tensor_op_for(CmpOp op) {
  static const int table[] = {
#define KILN_CMPOP(e, sym, opname) op_index::opname,
#include "runtime/value/operators.def"
#undef KILN_CMPOP
  };
  return table[int(op)];
}
int tensor_op_for(UnOp op) {
  static const int table[] = {
#define KILN_UNOP(e, sym, opname) op_index::opname,
#include "runtime/value/operators.def"
#undef KILN_UNOP
  };
  return table[int(op)];
}

namespace {
Value b_op(CallContext&, const BuiltinObj& self, const CallArgs& args) { return call_op(OpId(self.op), args); }
}  // namespace

Value op_builtin(int op_id) {
  static const std::vector<Value> table = [] {
    std::vector<Value> t;
    for (int i = 0; i < kNumOps; ++i) {
      Value b = make_builtin(op_def(OpId(i)).name, b_op);
      b.as<BuiltinObj>()->op = i;
      t.push_back(census::permanent_value(b));
    }
    return t;
  }();
  return table[size_t(op_id)];
}

namespace {

int op_id(std::string_view name) {
  const OpDef* op = find_op(name);
  return op ? int(op->id) : -1;
}

const TensorSlots kTensorSlots = {
    [](BinOp op) { return tensor_op_for(op); },
    [](CmpOp op) { return tensor_op_for(op); },
    [](UnOp op) { return tensor_op_for(op); },
    op_id,
    [](int op, const CallArgs& args) { return call_op(OpId(op), args); },
    tensor_getitem,
    tensor_setitem,
    [](const StrObj* name) {
      const OpDef* op = find_op(name->s);
      return op && op->arity != 0 ? op_builtin(int(op->id)) : Value::null();
    },
    // Every registry op by its name; Python's builtins of the same name
    // (abs, sum, pow) replace theirs afterwards with dispatching versions.
    [](NameMap& builtins) {
      for (int i = 0; i < kNumOps; ++i) builtins.set(op_def(OpId(i)).name, op_builtin(i));
    },
    manual_seed,
};

const bool installed = (set_tensor_slots(&kTensorSlots), true);

}  // namespace

// runtime/CMakeLists.txt asks every link for this symbol, which keeps this
// object, and so the initialiser above, in it.
extern "C" const bool* kiln_tensor_slots_anchor() { return &installed; }

}  // namespace kiln::runtime
