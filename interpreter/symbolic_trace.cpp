#include "interpreter/symbolic_trace.h"

#include "interpreter/code_builder.h"
#include "interpreter/instruction_translator.h"
#include "interpreter/vm.h"
#include "runtime/value_ops.h"

namespace kiln::interpreter {

using namespace kiln::runtime;
using output_graph::Arg;
namespace vars = kiln::variables;

namespace {

// The graph's output for the root's result: tensors by node, Python values
// as constants, tuples/lists as lists of those.
Arg output_arg(InstructionTranslator& tx, const VT& v0) {
  VT v = tx.realize(v0);
  if (v->is(VTKind::Tensor)) return Arg::of(v->node);
  if (v->is(VTKind::Tuple) || v->is(VTKind::List)) {
    std::vector<Arg> items;
    for (const VT& x : v->items) items.push_back(output_arg(tx, x));
    return Arg::list(std::move(items));
  }
  if (tx.is_constant(v)) return Arg::constant(tx.constant_value(v));
  throw_error(ErrorKind::RuntimeError, "symbolic_trace: the root returned " + v->str() + ", not tensors and values");
}

}  // namespace

GraphModule symbolic_trace(const Value& root, const std::vector<Value>& example_inputs, output_graph::Tracer* tracer,
                           bool make_runner) {
  if (!root.is(Kind::Module)) throw_error(ErrorKind::TypeError, "symbolic_trace expects a Module");
  output_graph::Tracer default_tracer(root);
  if (!tracer) tracer = &default_tracer;

  // The frame being traced: forward(self, x0, ..., xn): return self(x0, ..., xn)
  CodeBuilder b("forward", "<symbolic_trace>");
  b.arg("self");
  for (size_t i = 0; i < example_inputs.size(); ++i) b.arg("x" + std::to_string(i));
  b.set_line(1);
  for (size_t i = 0; i <= example_inputs.size(); ++i) b.emit(Opcode::LOAD_FAST, int32_t(i));
  b.emit(Opcode::CALL, int32_t(example_inputs.size()));
  b.emit(Opcode::RETURN_VALUE);
  auto fn = make_ref<FunctionObj>();
  fn->code = b.finish();

  VM vm;
  TraceContext ctx(vm);
  ctx.tracer = tracer;
  ctx.out.guards().disable();
  std::vector<VT> locals(fn->code->varnames.size());
  locals[0] = vars::make_nn_module(root, "", output_graph::local_source("self", 0));
  for (size_t i = 0; i < example_inputs.size(); ++i) {
    // Every input is a placeholder, in order, used or not (as FX makes them).
    auto source = output_graph::local_source("x" + std::to_string(i), int(i + 1));
    locals[i + 1] = ctx.builder.wrap(example_inputs[i], source);
  }
  InstructionTranslator tx(ctx, fn, std::move(locals), nullptr);
  Arg out;
  try {
    tx.run();
    out = output_arg(tx, tx.result());
  } catch (const Unsupported& u) {
    throw_error(ErrorKind::RuntimeError, "symbolic_trace of " + root.as<ModuleObj>()->class_name() +
                                             " cannot continue: " +
                                             (u.cause.empty() ? break_reason_text(u.reason, u.detail) : u.cause));
  }
  GraphModule gm;
  gm.root = root;
  gm.graph = ctx.out.graph_ptr();
  gm.graph->output(out.kind == Arg::Kind::List ? out.items : std::vector<Arg>{out});
  if (make_runner) gm.run = output_graph::eager_backend(gm.graph, example_inputs);
  return gm;
}

}  // namespace kiln::interpreter
