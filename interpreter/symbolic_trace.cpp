#include "interpreter/symbolic_trace.h"

#include <functional>
#include <optional>
#include <set>

#include <spdlog/spdlog.h>

#include "interpreter/code_builder.h"
#include "interpreter/instruction_translator.h"
#include "interpreter/vm.h"
#include "runtime/base/log.h"
#include "runtime/semantics/value_ops.h"

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

// A graph break inside the trace, as the error symbolic_trace raises.
std::string break_text(const Unsupported& u) {
  return (u.cause.empty() ? break_reason_text(u.reason, u.detail) : u.cause) +
         (u.where.empty() ? "" : " (at " + u.where + ")");
}

[[noreturn]] void raise_break(const Value& root, const Unsupported& u) {
  throw_error(ErrorKind::RuntimeError,
              "symbolic_trace of " + root.as<ModuleObj>()->class_name() + " cannot continue: " + break_text(u));
}

// One trace of root(*examples). `dynamic[i]`: the dims of input i that
// enter as symbols. Graph breaks propagate as Unsupported; on a kiln::Error
// `progress` (when given) is how many nodes the graph had reached.
GraphModule trace_once(const Value& root, const std::vector<Value>& example_inputs, output_graph::Tracer* tracer,
                       const std::vector<std::vector<bool>>& dynamic, output_graph::HintLearner* learner,
                       size_t* progress, std::string* where = nullptr) {
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
  ctx.out.guards().shapes().learner = learner;
  std::vector<VT> locals(fn->code->varnames.size());
  locals[0] = vars::make_nn_module(root, "", output_graph::local_source("self", 0));
  for (size_t i = 0; i < example_inputs.size(); ++i) {
    // Every input is a placeholder, in order, used or not (as FX makes them).
    auto source = output_graph::local_source("x" + std::to_string(i), int(i + 1));
    if (i < dynamic.size()) ctx.builder.dynamic_dims[source->str()] = dynamic[i];
    locals[i + 1] = ctx.builder.wrap(example_inputs[i], source);
  }
  InstructionTranslator tx(ctx, fn, std::move(locals), nullptr);
  Arg out;
  try {
    tx.run();
    out = output_arg(tx, tx.result());
  } catch (...) {
    if (progress) *progress = ctx.out.graph().nodes().size();
    if (where) *where = ctx.error_where;
    throw;
  }
  GraphModule gm;
  gm.root = root;
  gm.graph = ctx.out.graph_ptr();
  gm.graph->output(out.kind == Arg::Kind::List ? out.items : std::vector<Arg>{out});
  gm.graph->shape_guards = ctx.out.guards().shapes().guards();
  return gm;
}

// ------------------------------------------------ tracing without examples --

// Thrown by the learner when it changed a guess: the trace starts again.
struct GuessRevised {};

constexpr int kMaxRank = 5;
constexpr int kMaxRevisions = 32;

// The guesses for the inputs of a trace without examples, and how they are
// revised when an op's concrete rule refuses them. Hints start as distinct
// primes (no accidental equality between dims, none of the usual constant
// sizes), large enough that convolutions and pools keep a size.
class InputGuesses final : public output_graph::HintLearner {
 public:
  struct Input {
    runtime::DType dtype = runtime::DType::Float32;
    std::vector<int64_t> hints;
    std::vector<bool> dynamic;
    std::set<size_t> learned_number;  // dims an op required to be a number
  };
  std::vector<Input> inputs;
  std::string last_revision;  // for the log

  explicit InputGuesses(const std::vector<int>& ranks) {
    static const int64_t kPrimes[] = {17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 101};
    size_t next = 0;
    for (int r : ranks) {
      Input in;
      for (int d = 0; d < r; ++d) in.hints.push_back(kPrimes[next++ % std::size(kPrimes)]);
      in.dynamic.assign(size_t(r), true);
      inputs.push_back(std::move(in));
    }
  }

  std::vector<Value> examples() const {
    std::vector<Value> out;
    for (const Input& in : inputs) out.push_back(Value::tensor(runtime::Tensor::empty(in.hints, in.dtype)));
    return out;
  }
  std::vector<std::vector<bool>> dynamic() const {
    std::vector<std::vector<bool>> out;
    for (const Input& in : inputs) out.push_back(in.dynamic);
    return out;
  }

  // Symbol ids are made in input order, one per dynamic dim (OutputGraph::add_input).
  std::pair<size_t, size_t> dim_of_symbol(int id) const {
    int k = 0;
    for (size_t i = 0; i < inputs.size(); ++i)
      for (size_t d = 0; d < inputs[i].dynamic.size(); ++d)
        if (inputs[i].dynamic[d] && inputs[i].hints[d] >= 2 && k++ == id) return {i, d};
    return {SIZE_MAX, 0};
  }

  void refused(runtime::OpId op, const std::vector<Arg>& args, const std::vector<std::pair<std::string, Arg>>& kwargs,
               const output_graph::ShapeEnv& env) override {
    Candidates c;
    for (const Arg& a : args) collect(a, env, c);
    for (const auto& kv : kwargs) collect(kv.second, env, c);
    const std::vector<int64_t> hints = env.hints();
    std::set<int64_t> values = c.numbers;
    values.insert(c.sizes.begin(), c.sizes.end());
    // A number the call holds that is no other size's is what the op
    // requires the size to be: the graph has that number there. A size
    // learned equal to another size is a relation: both stay symbols.
    auto revise = [&](int id, int64_t v, bool number) {
      auto [i, d] = dim_of_symbol(id);
      if (i == SIZE_MAX) return false;
      inputs[i].hints[d] = v;
      if (number) inputs[i].learned_number.insert(d);
      last_revision = env.origin(id) + " = " + std::to_string(v);
      return true;
    };
    auto is_number = [&](int64_t v) { return c.numbers.count(v) && !c.sizes.count(v); };
    // The dtypes to try: the guesses, then each input passed as it is
    // retyped (indices are int64, masks bool).
    std::vector<std::pair<size_t, runtime::DType>> typings{{SIZE_MAX, runtime::DType::Float32}};
    for (size_t i : c.typed)
      for (runtime::DType dt : {runtime::DType::Int64, runtime::DType::Bool})
        if (dt != inputs[i].dtype) typings.push_back({i, dt});
    auto retype = [&](const std::pair<size_t, runtime::DType>& t) {
      if (t.first == SIZE_MAX) return;
      inputs[t.first].dtype = t.second;
      last_revision += (last_revision.empty() ? "" : ", ") + std::string("x") + std::to_string(t.first) + " is " +
                       runtime::dtype_name(t.second);
    };
    for (const auto& t : typings) {
      last_revision.clear();
      if (t.first != SIZE_MAX && rule_accepts(op, args, kwargs, hints, t.first, t.second)) {
        retype(t);
        throw GuessRevised{};
      }
      // One size: the numbers the call holds, then any size up to 1024.
      for (int pass = 0; pass < 2; ++pass)
        for (int id : c.syms) {
          auto try_value = [&](int64_t v, bool number) {
            // A size 1 is never a symbol: only a number the op requires.
            if (v < (number ? 1 : 2) || v == hints[size_t(id)]) return false;
            std::vector<int64_t> h = hints;
            h[size_t(id)] = v;
            if (!rule_accepts(op, args, kwargs, h, t.first, t.second) || !revise(id, v, number)) return false;
            retype(t);
            return true;
          };
          if (pass == 0) {
            for (int64_t v : values)
              if (try_value(v, is_number(v))) throw GuessRevised{};
          } else {
            for (int64_t v = 2; v <= 1024; ++v)
              if (try_value(v, true)) throw GuessRevised{};
          }
        }
      // Two sizes at once (a broadcast of two inputs), from the call's numbers.
      for (auto a = c.syms.begin(); a != c.syms.end(); ++a)
        for (auto b = std::next(a); b != c.syms.end(); ++b)
          for (int64_t va : values)
            for (int64_t vb : values) {
              if (va < (is_number(va) ? 1 : 2) || vb < (is_number(vb) ? 1 : 2)) continue;
              std::vector<int64_t> h = hints;
              h[size_t(*a)] = va;
              h[size_t(*b)] = vb;
              if (h == hints || !rule_accepts(op, args, kwargs, h, t.first, t.second)) continue;
              if (revise(*a, va, is_number(va)) && revise(*b, vb, is_number(vb))) {
                retype(t);
                throw GuessRevised{};
              }
            }
    }
  }

 private:
  // The input a node is, when it is one passed as it is (its sizes are
  // that input's symbols, in order, and its dtype the guessed one).
  std::optional<size_t> input_of(const output_graph::TensorMeta& m) const {
    if (m.sym.empty()) return std::nullopt;
    auto first = m.sym[0].as_symbol();
    if (!first) return std::nullopt;
    auto [i, d] = dim_of_symbol(*first);
    if (i == SIZE_MAX || d != 0 || m.sym.size() != inputs[i].hints.size() || m.dtype != inputs[i].dtype)
      return std::nullopt;
    for (size_t k = 0; k < m.sym.size(); ++k) {
      auto s = m.sym[k].as_symbol();
      if (!s || *s != *first + int(k)) return std::nullopt;
    }
    return i;
  }

  // What a refused call holds: the symbols its sizes read, the numbers in
  // it (static sizes, int arguments), the sizes its symbolic dims have now,
  // and the inputs passed as they are.
  struct Candidates {
    std::set<int> syms;
    std::set<int64_t> numbers;
    std::set<int64_t> sizes;
    std::set<size_t> typed;
  };

  void collect(const Arg& a, const output_graph::ShapeEnv& env, Candidates& c) const {
    switch (a.kind) {
      case Arg::Kind::Node: {
        const output_graph::TensorMeta& m = *a.node->meta;
        for (size_t d = 0; d < m.sizes.size(); ++d) {
          const bool symbolic = d < m.sym.size() && m.sym[d].has_symbols();
          (symbolic ? c.sizes : c.numbers).insert(m.sizes[d]);
          if (symbolic)
            for (int id : m.sym[d].symbols()) c.syms.insert(id);
        }
        if (auto i = input_of(m)) c.typed.insert(*i);
        return;
      }
      case Arg::Kind::Sym:
        c.sizes.insert(env.hint(a.sym));
        for (int id : a.sym.symbols()) c.syms.insert(id);
        return;
      case Arg::Kind::Const:
        if (a.value.is(Kind::Int)) c.numbers.insert(a.value.as_int());
        if (a.value.is(Kind::Tuple))
          for (const Value& x : a.value.as<TupleObj>()->items)
            if (x.is(Kind::Int)) c.numbers.insert(x.as_int());
        return;
      case Arg::Kind::List:
        for (const Arg& x : a.items) collect(x, env, c);
        return;
    }
  }

  // An argument's meta value at hints `h` (input `retyped` as `dtype`).
  Value meta_at(const Arg& a, const std::vector<int64_t>& h, size_t retyped, runtime::DType dtype) const {
    switch (a.kind) {
      case Arg::Kind::Node: {
        const output_graph::TensorMeta& m = *a.node->meta;
        runtime::Shape sizes = m.sizes;
        for (size_t d = 0; d < m.sym.size() && d < sizes.size(); ++d) sizes[d] = m.sym[d].evaluate(h);
        // Strides keep the order of the traced ones (a transposed view
        // stays transposed), dense at the new sizes.
        std::vector<size_t> order(sizes.size());
        for (size_t d = 0; d < order.size(); ++d) order[d] = d;
        std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return m.strides[x] > m.strides[y]; });
        runtime::Shape strides(sizes.size());
        int64_t step = 1;
        for (size_t k = order.size(); k-- > 0;) {
          strides[order[k]] = step;
          step *= std::max<int64_t>(sizes[order[k]], 1);
        }
        auto i = input_of(m);
        const runtime::DType dt = i && *i == retyped ? dtype : m.dtype;
        return Value::tensor(runtime::Tensor::meta(sizes, dt, strides));
      }
      case Arg::Kind::Sym: return Value::integer(a.sym.evaluate(h));
      case Arg::Kind::Const: return a.value;
      case Arg::Kind::List: {
        std::vector<Value> items;
        for (const Arg& x : a.items) items.push_back(meta_at(x, h, retyped, dtype));
        return make_tuple(std::move(items));
      }
    }
    return Value::none();
  }

  bool rule_accepts(runtime::OpId op, const std::vector<Arg>& args,
                    const std::vector<std::pair<std::string, Arg>>& kwargs, const std::vector<int64_t>& h,
                    size_t retyped, runtime::DType dtype) const {
    try {
      std::vector<Value> values;
      std::vector<Value> names;
      for (const Arg& a : args) values.push_back(meta_at(a, h, retyped, dtype));
      for (const auto& [k, a] : kwargs) {
        values.push_back(meta_at(a, h, retyped, dtype));
        names.push_back(intern_value(k));
      }
      Value kwnames = names.empty() ? Value::none() : make_tuple(std::move(names));
      runtime::infer_meta(op, runtime::CallArgs{values.data(), values.size(),
                                                kwnames.is(Kind::Tuple) ? kwnames.as<TupleObj>() : nullptr});
      return true;
    } catch (const Error&) {
      return false;
    }
  }
};

// Every rank vector with entries 1..kMaxRank, by total rank, then in
// lexicographic order: the smallest ranks that trace win.
std::vector<std::vector<int>> rank_vectors(size_t n) {
  std::vector<std::vector<int>> out;
  if (n == 0) return {{}};
  constexpr size_t kMaxVectors = 256;
  for (int total = int(n); total <= int(n) * kMaxRank && out.size() < kMaxVectors; ++total) {
    std::vector<int> v(n, 1);
    std::function<void(size_t, int)> fill = [&](size_t i, int left) {
      if (out.size() >= kMaxVectors) return;
      if (i + 1 == n) {
        if (left >= 1 && left <= kMaxRank) {
          v[i] = left;
          out.push_back(v);
        }
        return;
      }
      for (int r = 1; r <= kMaxRank && r < left; ++r) {
        v[i] = r;
        fill(i + 1, left - r);
      }
    };
    fill(0, total);
  }
  return out;
}

std::string ranks_str(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::string("x") + std::to_string(i) + " of rank " + std::to_string(ranks[i]);
  return s;
}

}  // namespace

GraphModule symbolic_trace(const Value& root, const std::vector<Value>& example_inputs, output_graph::Tracer* tracer,
                           bool make_runner, bool dynamic) {
  std::vector<std::vector<bool>> dyn;
  if (dynamic)
    for (const Value& x : example_inputs)
      dyn.push_back(std::vector<bool>(x.is(Kind::Tensor) ? size_t(x.as_tensor().dim()) : 0, true));
  GraphModule gm;
  try {
    gm = trace_once(root, example_inputs, tracer, dyn, nullptr, nullptr);
  } catch (const Unsupported& u) {
    raise_break(root, u);
  }
  if (make_runner) gm.run = output_graph::eager_backend(gm.graph, example_inputs);
  return gm;
}

GraphModule symbolic_trace_without_examples(const Value& root, size_t num_inputs, output_graph::Tracer* tracer,
                                            bool make_runner) {
  if (!root.is(Kind::Module)) throw_error(ErrorKind::TypeError, "symbolic_trace expects a Module");
  auto* lg = kiln::log::get("fx");
  struct Failure {
    std::vector<int> ranks;
    std::string error;
    size_t progress = 0;
  };
  std::optional<Failure> furthest;
  for (const std::vector<int>& ranks : rank_vectors(num_inputs)) {
    InputGuesses guesses(ranks);
    // Trace, revising the guesses until the trace goes through; then once
    // more with the sizes learned equal to a number made static.
    for (int pass = 0; pass < 2; ++pass) {
      std::optional<GraphModule> traced;
      for (int revision = 0; revision <= kMaxRevisions && !traced; ++revision) {
        size_t progress = 0;
        std::string where;
        try {
          traced = trace_once(root, guesses.examples(), tracer, guesses.dynamic(), &guesses, &progress, &where);
        } catch (const GuessRevised&) {
          if (lg) lg->info("symbolic_trace without examples ({}): revised {}", ranks_str(ranks), guesses.last_revision);
        } catch (const Unsupported& u) {
          // The program raising (an unpacking of size(), a rank check)
          // depends on the guesses; any other break does not.
          const BreakReason r = u.innermost();
          if (r != BreakReason::python_error && r != BreakReason::attribute_error && r != BreakReason::raise)
            raise_break(root, u);
          if (!furthest || progress > furthest->progress) furthest = Failure{ranks, break_text(u), progress};
          break;
        } catch (const Error& e) {
          const std::string why = std::string(e.what()) + (where.empty() ? "" : " (at " + where + ")");
          if (!furthest || progress > furthest->progress) furthest = Failure{ranks, why, progress};
          break;
        }
      }
      if (!traced) break;
      bool frozen = false;
      for (InputGuesses::Input& in : guesses.inputs)
        for (size_t d : in.learned_number)
          if (in.dynamic[d]) {
            in.dynamic[d] = false;
            frozen = true;
          }
      for (const output_graph::ShapeGuard& g : traced->graph->shape_guards) {
        if (g.rel != output_graph::Rel::EQ || !g.rhs.is_constant()) continue;
        auto id = g.lhs.as_symbol();
        if (!id) continue;
        auto [i, d] = guesses.dim_of_symbol(*id);
        if (i == SIZE_MAX) continue;
        guesses.inputs[i].hints[d] = g.rhs.constant_value();
        guesses.inputs[i].dynamic[d] = false;
        frozen = true;
      }
      if (pass == 1 || !frozen) {
        if (lg) lg->info("symbolic_trace without examples: {}", ranks_str(ranks));
        if (make_runner) traced->run = output_graph::eager_backend(traced->graph, guesses.examples());
        return std::move(*traced);
      }
    }
  }
  std::string msg = "symbolic_trace of " + root.as<ModuleObj>()->class_name() +
                    " without example inputs: no guess of its inputs' ranks, sizes and dtypes traces";
  if (furthest) msg += " (the furthest, " + ranks_str(furthest->ranks) + ", stopped at: " + furthest->error + ")";
  throw_error(ErrorKind::RuntimeError, msg + ". Pass example inputs: symbolic_trace(model, x, ...)");
}

std::string input_mismatch(const output_graph::Graph& graph, const std::vector<Value>& inputs) {
  const std::vector<output_graph::Node*> ph = graph.placeholders();
  if (ph.size() != inputs.size())
    return std::to_string(inputs.size()) + " inputs for a graph of " + std::to_string(ph.size());
  for (size_t i = 0; i < ph.size(); ++i) {
    const output_graph::TensorMeta& m = *ph[i]->meta;
    const std::string name = "input " + std::to_string(i) + " (" + ph[i]->name + ")";
    if (!inputs[i].is(Kind::Tensor)) return name + " is not a tensor";
    const runtime::Tensor& t = inputs[i].as_tensor();
    if (t.dtype() != m.dtype)
      return name + " is " + runtime::dtype_name(t.dtype()) + ", traced as " + runtime::dtype_name(m.dtype);
    if (size_t(t.dim()) != m.sizes.size())
      return name + " has " + std::to_string(t.dim()) + " dims, traced with " + std::to_string(m.sizes.size());
    for (size_t d = 0; d < m.sizes.size(); ++d) {
      const int64_t got = t.sizes()[d];
      const bool symbol = d < m.sym.size() && m.sym[d].has_symbols();
      if (symbol ? got < 2 : got != m.sizes[d])
        return name + " has size " + std::to_string(got) + " at dim " + std::to_string(d) + ", traced as " +
               (symbol ? m.sym[d].str() + " (0 and 1 specialize)" : std::to_string(m.sizes[d]));
    }
  }
  if (graph.shape_guards.empty()) return "";
  const std::vector<int64_t> values = graph.symbol_values(inputs);
  for (const output_graph::ShapeGuard& g : graph.shape_guards)
    if (!g.holds(values)) return "the trace assumed " + g.str();
  return "";
}

}  // namespace kiln::interpreter
