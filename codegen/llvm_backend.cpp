#include "codegen/llvm_backend.h"
#include "runtime/base/fault_injection.h"

#include <chrono>
#include <cstring>
#include <mutex>

#include <spdlog/spdlog.h>

#include "codegen/jit.h"
#include "runtime/base/error.h"
#include "runtime/base/log.h"
#include "runtime/base/thread_pool.h"
#include "runtime/kernels/blas.h"
#include "runtime/semantics/value_ops.h"

namespace kiln::codegen {

using output_graph::Arg;
using output_graph::CompiledGraph;
using output_graph::Graph;
using output_graph::Node;
using output_graph::NodeOp;
using runtime::Kind;
using runtime::Shape;
using runtime::Tensor;
using runtime::Value;

namespace {

thread_local BackendReport report;

int64_t eval_dim(const Dim& d, const int64_t* dyn) {
  int64_t v = d.coef;
  for (int s : d.syms) v *= dyn[s];
  return v;
}

Shape eval_dims(const Dims& ds, const int64_t* dyn) {
  Shape s(ds.size());
  for (size_t i = 0; i < ds.size(); ++i) s[i] = eval_dim(ds[i], dyn);
  return s;
}

// Elements per unit of outer[0]: the work a thread gets per index.
int64_t work_per_outer(const Kernel& k, const int64_t* dyn) {
  int64_t w = 1;
  for (size_t i = 1; i < k.outer.size(); ++i) w *= eval_dim(k.outer[i], dyn);
  for (const Dim& d : k.inner) w *= eval_dim(d, dyn);
  return std::max<int64_t>(w, 1);
}

// Below this many elements per chunk, threads cost more than they save.
constexpr int64_t kGrainElements = 32768;

class CompiledProgram {
 public:
  CompiledProgram(std::shared_ptr<const Graph> graph, Program p, CompiledKernels k, CompiledGraph eager)
      : graph_(std::move(graph)), p_(std::move(p)), k_(std::move(k)), eager_(std::move(eager)) {
    // Outputs and temporaries sized by an eager step's result (a kernel over
    // cat's output, in a program with dynamic sizes) are allocated once that
    // step has run: before, their symbols are unknown.
    // A derived symbol (SymSource::From::Expr) is as late as what it reads.
    std::vector<bool> from_step(p_.syms.size(), false);
    for (size_t s = 0; s < p_.syms.size(); ++s) {
      const SymSource& src = p_.syms[s];
      from_step[s] = src.from == SymSource::From::Step;
      if (src.from == SymSource::From::Expr)
        for (int d : src.expr.symbols()) from_step[s] = from_step[s] || from_step[size_t(d)];
    }
    late_.assign(p_.buffers.size(), false);
    for (size_t i = 0; i < p_.buffers.size(); ++i) {
      const Buffer& b = p_.buffers[i];
      if (b.kind != Buffer::Kind::Output && b.kind != Buffer::Kind::Temp) continue;
      for (const Dim& d : b.sizes)
        for (int sym : d.syms)
          if (from_step[size_t(sym)]) late_[i] = true;
      if (late_[i]) late_buffers_.push_back(i);
    }
    graph_syms_ = graph_->symbols.size();
    // What every call starts from: constant symbols known, the rest read
    // from the inputs (input_syms_) or derived (derived_syms_), so a call
    // visits only those.
    init_dyn_.assign(p_.syms.size(), 0);
    init_known_.assign(p_.syms.size(), false);
    for (size_t s = 0; s < p_.syms.size(); ++s) {
      const SymSource& src = p_.syms[s];
      if (src.from == SymSource::From::Input) input_syms_.push_back(s);
      if (src.from != SymSource::From::Expr) continue;
      if (src.expr.is_constant()) {
        init_dyn_[s] = src.expr.constant_value();
        init_known_[s] = true;
      } else {
        derived_syms_.push_back(s);
      }
    }
  }

  std::vector<Value> operator()(runtime::CallContext& ctx, const std::vector<Value>& inputs);

 private:
  // Evaluates the checks whose symbols are all known and not yet done.
  bool checks_hold(const std::vector<int64_t>& dyn, const std::vector<bool>& known, std::vector<bool>& done,
                   std::string& why) const;
  // Computes the derived symbols whose operands are known (in order: an
  // expression reads only earlier symbols).
  void derive(std::vector<int64_t>& dyn, std::vector<bool>& known) const;
  std::vector<Value> run_eagerly(runtime::CallContext& ctx, const std::vector<Value>& inputs, const std::string& why);
  bool inputs_match(const std::vector<Value>& inputs, const std::vector<int64_t>& dyn, std::string& why) const;
  Value tensor_arg(const Access& a, const Dims& sizes, const std::vector<char*>& bufs, const std::vector<Value>& owners,
                   const int64_t* dyn) const;
  Value run_eager(runtime::CallContext& ctx, const EagerStep& s, const std::vector<char*>& bufs,
                  const std::vector<Value>& owners, const std::vector<Value>& eager_results, const int64_t* dyn,
                  const std::vector<std::pair<const char*, const char*>>& temps) const;
  void run_gemm(const Gemm& g, const std::vector<char*>& bufs, const int64_t* dyn) const;

  std::shared_ptr<const Graph> graph_;
  Program p_;
  CompiledKernels k_;
  CompiledGraph eager_;
  // A call's working arrays. The program keeps one set, reused by the call
  // that holds arena_mu_ (a concurrent call makes its own): a small graph's
  // cached call made a dozen heap allocations here before its first kernel,
  // a tenth of the call. release() drops the tensors a call held, so a
  // finished call keeps no input or output alive.
  struct Scratch {
    std::vector<int64_t> dyn;
    std::vector<bool> known, done;
    std::vector<char*> bufs, kbufs;
    std::vector<Value> owners, eager_results;
    std::vector<std::pair<const char*, const char*>> temps;
    void release() {
      owners.clear();
      eager_results.clear();
    }
  };
  std::mutex arena_mu_;
  Scratch scratch_;  // under arena_mu_
  runtime::Ref<runtime::Storage> arena_;
  std::vector<runtime::Ref<runtime::Storage>> dyn_pool_;  // per buffer: a dynamic program's temporary (under arena_mu_)
  size_t graph_syms_ = 0;            // program symbols 0..graph_syms_-1 are the graph's
  std::vector<bool> late_;           // per buffer: sized by an eager step's result
  std::vector<size_t> late_buffers_;  // those buffers
  std::vector<int64_t> init_dyn_;
  std::vector<bool> init_known_;
  std::vector<size_t> input_syms_, derived_syms_;
};

bool CompiledProgram::checks_hold(const std::vector<int64_t>& dyn, const std::vector<bool>& known,
                                  std::vector<bool>& done, std::string& why) const {
  for (size_t i = 0; i < p_.checks.size(); ++i) {
    if (done[i]) continue;
    const Check& c = p_.checks[i];
    bool ready = true;
    for (const Dim* d : {&c.lhs, &c.rhs})
      for (int s : d->syms) ready = ready && known[size_t(s)];
    if (!ready) continue;
    done[i] = true;
    const int64_t l = eval_dim(c.lhs, dyn.data());
    const bool ok = c.at_least_two ? l >= 2 : l == eval_dim(c.rhs, dyn.data());
    if (!ok) {
      why = c.why;
      return false;
    }
  }
  return true;
}

void CompiledProgram::derive(std::vector<int64_t>& dyn, std::vector<bool>& known) const {
  for (size_t s : derived_syms_) {
    const SymSource& src = p_.syms[s];
    if (known[s]) continue;
    bool ready = true;
    for (int d : src.expr.symbols()) ready = ready && known[size_t(d)];
    if (!ready) continue;
    dyn[s] = src.expr.evaluate(dyn);
    known[s] = true;
  }
}

Value CompiledProgram::tensor_arg(const Access& a, const Dims& sizes, const std::vector<char*>& bufs,
                                  const std::vector<Value>& owners, const int64_t* dyn) const {
  const Buffer& b = p_.buffers[size_t(a.buffer)];
  const Shape sz = eval_dims(sizes, dyn), st = eval_dims(a.strides, dyn);
  const int64_t off = eval_dim(a.offset, dyn);
  const Value& owner = owners[size_t(a.buffer)];
  if (owner.is(Kind::Tensor)) {
    const Tensor t = owner.as_tensor();
    if (off == 0 && sz == t.sizes() && st == t.strides()) return owner;  // the tensor itself, as eager would pass it
    return Value::tensor(t.as_strided(sz, st, t.offset() + off));
  }
  // A temporary in the arena: a borrowed view (never outlives the call; a
  // result aliasing it is copied out, see run_eager).
  char* p = bufs[size_t(a.buffer)] + off * int64_t(runtime::itemsize(b.dtype));
  return Value::tensor(Tensor::from_blob(p, sz, st, b.dtype, [](void*) {}));
}

Value CompiledProgram::run_eager(runtime::CallContext& ctx, const EagerStep& s, const std::vector<char*>& bufs,
                                 const std::vector<Value>& owners, const std::vector<Value>& eager_results,
                                 const int64_t* dyn,
                                 const std::vector<std::pair<const char*, const char*>>& temps) const {
  std::unordered_map<const Node*, Value> env;
  for (size_t i = 0; i < s.arg_nodes.size(); ++i) {
    const Node* n = s.arg_nodes[i];
    if (s.tensor_args[i].buffer >= 0) env[n] = tensor_arg(s.tensor_args[i], s.tensor_sizes[i], bufs, owners, dyn);
    else if (s.arg_steps[i] >= 0) env[n] = eager_results[size_t(s.arg_steps[i])];
  }
  std::vector<int64_t> graph_syms;  // a size computed from the graph's symbols (issue 14)
  std::function<Value(const Arg&)> arg = [&](const Arg& a) -> Value {
    if (a.kind == Arg::Kind::Node) return env[a.node];
    if (a.kind == Arg::Kind::Const) return a.value;
    if (a.kind == Arg::Kind::Sym) {
      if (graph_syms.empty()) graph_syms.assign(dyn, dyn + graph_syms_);
      return Value::integer(a.sym.evaluate(graph_syms));
    }
    std::vector<Value> items;
    for (const Arg& i : a.items) items.push_back(arg(i));
    return runtime::make_tuple(std::move(items));
  };
  const Node& n = *s.node;
  std::vector<Value> argv;
  std::vector<Value> names;
  for (const Arg& a : n.args) argv.push_back(arg(a));
  for (const auto& kv : n.kwargs) {
    argv.push_back(arg(kv.second));
    names.push_back(runtime::intern_value(kv.first));
  }
  const bool has_kw = !names.empty();
  Value kwn = has_kw ? runtime::make_tuple(std::move(names)) : Value();
  const runtime::TupleObj* kw = has_kw ? kwn.as<runtime::TupleObj>() : nullptr;
  Value r;
  switch (n.op) {
    case NodeOp::CallFunction:
      r = runtime::call_op(runtime::OpId(n.op_id), runtime::CallArgs{argv.data(), argv.size(), kw});
      break;
    case NodeOp::CallModule: {
      Value m = n.target_path ? n.module : *graph_->attr(n.target_str());
      r = ctx.call(m, runtime::CallArgs{argv.data(), argv.size(), kw});
      break;
    }
    case NodeOp::CallMethod: {
      Value method = runtime::get_attr(ctx, argv[0], runtime::intern(n.target).get());
      r = ctx.call(method, runtime::CallArgs{argv.data() + 1, argv.size() - 1, kw});
      break;
    }
    default: throw_error(ErrorKind::RuntimeError, "llvm backend: node '" + n.name + "' is not an eager step");
  }
  if (r.is(Kind::Tensor)) {
    Tensor t = r.as_tensor();
    const char* d = t.numel() ? static_cast<const char*>(t.raw_data()) : nullptr;
    // Later kernels read it as contiguous, and it must not point into the
    // arena (an identity module returns its argument).
    bool in_temp = false;
    for (const auto& [lo, hi] : temps) in_temp = in_temp || (d && d >= lo && d < hi);
    if (!t.is_contiguous() || in_temp) r = Value::tensor(t.clone());
  }
  return r;
}

void CompiledProgram::run_gemm(const Gemm& g, const std::vector<char*>& bufs, const int64_t* dyn) const {
  const int64_t m = eval_dim(g.m, dyn), n = eval_dim(g.n, dyn), k = eval_dim(g.k, dyn);
  int64_t count = 1;
  std::vector<int64_t> bsize(g.batch.size()), as(g.batch.size()), bs(g.batch.size());
  for (size_t i = 0; i < g.batch.size(); ++i) {
    bsize[i] = eval_dim(g.batch[i], dyn);
    as[i] = eval_dim(g.a_batch[i], dyn);
    bs[i] = eval_dim(g.b_batch[i], dyn);
    count *= bsize[i];
  }
  if (m == 0 || n == 0 || count == 0) return;
  const size_t isz = runtime::itemsize(g.dtype);
  char* a = bufs[size_t(g.a)] + eval_dim(g.a_offset, dyn) * int64_t(isz);
  char* b = bufs[size_t(g.b)] + eval_dim(g.b_offset, dyn) * int64_t(isz);
  char* c = bufs[size_t(g.out)];
  const int64_t lda = std::max<int64_t>(1, eval_dim(g.lda, dyn)), ldb = std::max<int64_t>(1, eval_dim(g.ldb, dyn));
  if (k == 0) {
    std::memset(c, 0, size_t(count * m * n) * isz);
    return;
  }
  // The batch in row-major order (the output's), an odometer over its dims
  // carrying each operand's element offset.
  std::vector<int64_t> idx(g.batch.size(), 0);
  int64_t ao = 0, bo = 0;
  for (int64_t i = 0; i < count; ++i) {
    char* pa = a + ao * int64_t(isz);
    char* pb = b + bo * int64_t(isz);
    char* pc = c + i * m * n * int64_t(isz);
    if (g.dtype == runtime::DType::Float32)
      runtime::gemm_f32(g.trans_a, g.trans_b, m, n, k, reinterpret_cast<float*>(pa), lda, reinterpret_cast<float*>(pb),
                        ldb, reinterpret_cast<float*>(pc), n);
    else
      runtime::gemm_f64(g.trans_a, g.trans_b, m, n, k, reinterpret_cast<double*>(pa), lda,
                        reinterpret_cast<double*>(pb), ldb, reinterpret_cast<double*>(pc), n);
    for (size_t d = g.batch.size(); d-- > 0;) {
      ao += as[d];
      bo += bs[d];
      if (++idx[d] < bsize[d]) break;
      ao -= as[d] * bsize[d];
      bo -= bs[d] * bsize[d];
      idx[d] = 0;
    }
  }
}

// The kernels index inputs with the layout they were compiled for. Guards
// make that hold for traced calls; this keeps a direct call of the compiled
// graph (or a guard with a layout class wider than the kernels assume, such
// as a transposed dynamic input whose strides move with its sizes) from
// reading the wrong elements. A few comparisons per input.
bool CompiledProgram::inputs_match(const std::vector<Value>& inputs, const std::vector<int64_t>& dyn,
                                   std::string& why) const {
  for (const Buffer& b : p_.buffers) {
    if (b.kind != Buffer::Kind::Input) continue;
    const Value& v = inputs[size_t(b.index)];
    if (!v.is(Kind::Tensor)) {
      why = "input " + std::to_string(b.index) + " is not a tensor";
      return false;
    }
    const Tensor t = v.as_tensor();
    bool ok = t.dtype() == b.dtype && size_t(t.dim()) == b.sizes.size();
    for (size_t d = 0; ok && d < b.sizes.size(); ++d) {
      const int64_t size = eval_dim(b.sizes[d], dyn.data());
      ok = t.sizes()[d] == size && (size <= 1 || t.strides()[d] == eval_dim(b.strides[d], dyn.data()));
    }
    if (!ok) {
      why = "input " + std::to_string(b.index) + " has another dtype, shape or layout than compiled for (" +
            runtime::dtype_name(t.dtype()) + runtime::shape_str(t.sizes()) + " strides " +
            runtime::shape_str(t.strides()) + ")";
      return false;
    }
  }
  return true;
}

std::vector<Value> CompiledProgram::run_eagerly(runtime::CallContext& ctx, const std::vector<Value>& inputs,
                                                const std::string& why) {
  if (auto* lg = log::get("output_code")) lg->info("llvm backend: this call runs eagerly: {}", why);
  return eager_(ctx, inputs);
}

std::vector<Value> CompiledProgram::operator()(runtime::CallContext& ctx, const std::vector<Value>& inputs) {
  if (inputs.size() != p_.num_inputs)
    throw_error(ErrorKind::RuntimeError, "llvm backend: the graph takes " + std::to_string(p_.num_inputs) +
                                             " inputs, got " + std::to_string(inputs.size()));
  // The arena and the working arrays: the program's own when free, else (a
  // concurrent call) fresh ones.
  std::unique_lock<std::mutex> arena_lock(arena_mu_, std::try_to_lock);
  Scratch own;
  Scratch& sc = arena_lock.owns_lock() ? scratch_ : own;
  struct Release {
    Scratch& sc;
    ~Release() { sc.release(); }
  } release{sc};
  std::vector<int64_t>& dyn = sc.dyn;
  std::vector<bool>& known = sc.known;
  std::vector<bool>& done = sc.done;
  dyn = init_dyn_;
  known = init_known_;
  done.assign(p_.checks.size(), false);
  for (size_t s : input_syms_) {  // a step's symbols are known once it ran
    const SymSource& src = p_.syms[s];
    dyn[s] = inputs[size_t(src.index)].as<runtime::TensorImpl>()->sizes[size_t(src.dim)];
    known[s] = true;
  }
  derive(dyn, known);
  std::string why;
  if (!checks_hold(dyn, known, done, why)) return run_eagerly(ctx, inputs, why);
  if (!inputs_match(inputs, dyn, why)) return run_eagerly(ctx, inputs, why);
  const size_t nb = p_.buffers.size();
  std::vector<char*>& bufs = sc.bufs;
  std::vector<Value>& owners = sc.owners;  // the tensor behind each buffer, where there is one
  bufs.assign(nb, nullptr);
  owners.resize(nb);
  runtime::Ref<runtime::Storage> arena;
  if (!p_.dynamic() && p_.arena_bytes) {
    if (arena_lock.owns_lock()) {
      if (!arena_) arena_ = runtime::Storage::allocate(size_t(p_.arena_bytes), false);
      arena = arena_;
    } else {
      arena = runtime::Storage::allocate(size_t(p_.arena_bytes), false);
    }
  }
  // Memory an eager step's result must not point into (it is reused):
  // the arena, or each temporary of a dynamic program.
  std::vector<std::pair<const char*, const char*>>& temps = sc.temps;
  temps.clear();
  if (arena) temps.emplace_back(static_cast<const char*>(arena->data), static_cast<const char*>(arena->data) + p_.arena_bytes);
  // A dynamic program's temporaries: the program's own when free, kept from
  // call to call and grown when a call needs more (fresh memory each call
  // costs its page faults: a GPT forward at T=135 took 1.7x its static
  // twin), else (a concurrent call) fresh ones.
  std::vector<runtime::Ref<runtime::Storage>> fresh_temps;
  if (p_.dynamic() && arena_lock.owns_lock()) dyn_pool_.resize(p_.buffers.size());
  auto bind = [&](size_t i) {
    const Buffer& b = p_.buffers[i];
    switch (b.kind) {
      case Buffer::Kind::Input: owners[i] = inputs[size_t(b.index)]; break;
      case Buffer::Kind::Attr: owners[i] = p_.attrs[size_t(b.index)]; break;
      case Buffer::Kind::Output:
        owners[i] = Value::tensor(Tensor::uninitialized(eval_dims(b.sizes, dyn.data()), b.dtype));
        break;
      case Buffer::Kind::Temp:
        if (arena) {
          bufs[i] = static_cast<char*>(arena->data) + b.arena_offset;
        } else {
          const int64_t bytes = std::max<int64_t>(1, runtime::shape_numel(eval_dims(b.sizes, dyn.data()))) *
                                int64_t(runtime::itemsize(b.dtype));
          runtime::Ref<runtime::Storage>* slot = nullptr;
          if (arena_lock.owns_lock()) {
            slot = &dyn_pool_[i];
            if (!*slot || (*slot)->nbytes < size_t(bytes)) *slot = runtime::Storage::allocate(size_t(bytes), false);
          } else {
            fresh_temps.push_back(runtime::Storage::allocate(size_t(bytes), false));
            slot = &fresh_temps.back();
          }
          bufs[i] = static_cast<char*>((*slot)->data);
          temps.emplace_back(bufs[i], bufs[i] + bytes);
        }
        return;
      case Buffer::Kind::Eager: return;  // bound when its step has run
    }
    const Tensor t = owners[i].as_tensor();
    bufs[i] = t.numel() ? static_cast<char*>(t.raw_data()) : nullptr;
  };
  for (size_t i = 0; i < nb; ++i)
    if (!late_[i]) bind(i);
  // A late buffer is bound after the eager step that makes its last symbol
  // known (a temporary's pointer or an output's tensor marks it bound).
  auto bind_late = [&] {
    for (size_t i : late_buffers_) {
      if (bufs[i] || owners[i].is(Kind::Tensor)) continue;
      bool ready = true;
      for (const Dim& d : p_.buffers[i].sizes)
        for (int sym : d.syms) ready = ready && known[size_t(sym)];
      if (ready) bind(i);
    }
  };

  std::vector<Value>& eager_results = sc.eager_results;
  eager_results.resize(p_.eager.size());
  std::vector<char*>& kbufs = sc.kbufs;
  for (const Step& st : p_.steps) {
    switch (st.kind) {
      case Step::Kind::Kernel: {
        const Kernel& k = p_.kernels[size_t(st.index)];
        const KernelFn fn = k_.fns[size_t(st.index)];
        const int64_t n0 = eval_dim(k.outer[0], dyn.data());
        const int64_t grain = std::max<int64_t>(1, kGrainElements / work_per_outer(k, dyn.data()));
        // The kernel's own pointer table (Kernel::buffers).
        kbufs.resize(k.buffers.size());
        for (size_t l = 0; l < k.buffers.size(); ++l) {
          const int buf = k.buffers[l];
          kbufs[l] = bufs[size_t(buf)] +
                     (l < k.base_offsets.size() ? k.base_offsets[l] * int64_t(runtime::itemsize(p_.buffers[size_t(buf)].dtype)) : 0);
        }
        char* const* b = kbufs.data();
        const int64_t* d = dyn.data();
        runtime::parallel_for(n0, grain, [&](int64_t lo, int64_t hi) { fn(b, d, lo, hi); });
        break;
      }
      case Step::Kind::Gemm: run_gemm(p_.gemms[size_t(st.index)], bufs, dyn.data()); break;
      case Step::Kind::Eager: {
        const EagerStep& s = p_.eager[size_t(st.index)];
        Value r = run_eager(ctx, s, bufs, owners, eager_results, dyn.data(), temps);
        eager_results[size_t(st.index)] = r;
        if (s.result >= 0) {
          if (!r.is(Kind::Tensor))
            throw_error(ErrorKind::RuntimeError, "llvm backend: eager step '" + s.node->name +
                                                     "' was traced as a tensor but returned " + kind_name(r.kind()));
          const Tensor t = r.as_tensor();
          const Buffer& b = p_.buffers[size_t(s.result)];
          for (size_t s2 = 0; s2 < p_.syms.size(); ++s2)
            if (p_.syms[s2].from == SymSource::From::Step && p_.syms[s2].index == st.index) {
              dyn[s2] = t.sizes()[size_t(p_.syms[s2].dim)];
              known[s2] = true;
            }
          derive(dyn, known);
          // Kernels are pure, so starting over eagerly is safe; an eager
          // step (a module call) runs twice then, which only a module with
          // side effects in a graph with dynamic sizes could notice.
          if (!checks_hold(dyn, known, done, why)) return run_eagerly(ctx, inputs, why);
          if (t.dtype() != b.dtype || t.sizes() != eval_dims(b.sizes, dyn.data()))
            throw_error(ErrorKind::RuntimeError, "llvm backend: eager step '" + s.node->name + "' returned " +
                                                     t.repr().substr(0, 0) + runtime::shape_str(t.sizes()) +
                                                     ", not the traced shape");
          owners[size_t(s.result)] = r;
          bufs[size_t(s.result)] = t.numel() ? static_cast<char*>(t.raw_data()) : nullptr;
          if (!late_buffers_.empty()) bind_late();
        }
        break;
      }
    }
  }
  std::vector<Value> out;
  out.reserve(p_.outputs.size());
  for (const OutputSpec& o : p_.outputs) {
    switch (o.kind) {
      case OutputSpec::Kind::Value: out.push_back(o.value); break;
      case OutputSpec::Kind::Eager: out.push_back(eager_results[size_t(o.eager_step)]); break;
      case OutputSpec::Kind::View: out.push_back(tensor_arg(o.view, o.sizes, bufs, owners, dyn.data())); break;
    }
  }
  return out;
}

}  // namespace

const BackendReport& last_report() { return report; }

CompiledGraph llvm_backend(std::shared_ptr<const Graph> graph, const std::vector<Value>& example_inputs) {
  runtime::fault_point("codegen");
  report = BackendReport{};
  const auto t0 = std::chrono::steady_clock::now();
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  CompiledGraph eager = output_graph::eager_backend(graph, example_inputs);
  try {
    Program p = schedule(*graph);
    const auto t1 = std::chrono::steady_clock::now();
    CompiledKernels k = compile_kernels(p);
    const auto t2 = std::chrono::steady_clock::now();
    report.kernels = p.kernels.size();
    report.kernels_distinct = distinct_kernels(p);
    report.gemms = p.gemms.size();
    report.eager_steps = p.eager.size();
    report.summary = p.summary();
    report.cache = p.kernels.empty()                              ? "none"
                   : k.from == CompiledKernels::From::Compiled      ? "compiled"
                   : k.from == CompiledKernels::From::MemoryCache ? "memory"
                   : k.from == CompiledKernels::From::DiskCache   ? "disk"
                                                                  : "process";
    report.ranks = k.ranks;
    report.kernels_compiled = k.compiled_here;
    report.kernels_received = k.received;
    report.objects = k.objects;
    report.exchange_ms = k.exchange_ms;
    report.load_ms = k.load_ms;
    report.object_bytes = k.object_bytes;
    report.schedule_ms = ms(t0, t1);
    report.compile_ms = ms(t1, t2);
    report.total_ms = ms(t0, t2);
    if (auto* lg = log::get("output_code"))
      lg->info("llvm backend: {} kernels, {} BLAS calls, {} eager steps ({}; schedule {:.2f} ms, compile {:.2f} ms: "
               "lower {:.2f}, optimize {:.2f}, codegen {:.2f}, load {:.2f}; {} distinct kernels, {} compiled here, {} "
               "received from {} ranks, exchanges {:.2f} ms)\n{}",
               report.kernels, report.gemms, report.eager_steps, report.cache, report.schedule_ms, report.compile_ms,
               k.lower_ms, k.optimize_ms, k.codegen_ms, k.load_ms, distinct_kernels(p), k.compiled_here, k.received, k.ranks,
               k.exchange_ms, report.summary);
    auto prog = std::make_shared<CompiledProgram>(graph, std::move(p), std::move(k), eager);
    return [prog](runtime::CallContext& ctx, const std::vector<Value>& inputs) { return (*prog)(ctx, inputs); };
  } catch (const Unsupported& u) {
    report.fell_back = true;
    report.reason = u.reason;
    if (auto* lg = log::get("output_code")) lg->info("llvm backend: the graph runs eagerly: {}", u.reason);
    return eager;
  }
}

void register_llvm_backend() { output_graph::register_backend("llvm", llvm_backend); }

namespace {
const bool registered = (register_llvm_backend(), true);
}

}  // namespace kiln::codegen
