// The scheduler's eager steps (scheduler_impl.h): what codegen does not
// lower (cat, embedding, constructors, module and method calls, integer
// ops that can raise, ...) runs its eager kernel as a step of the program,
// its tensor arguments materialized first. An op that writes its
// arguments makes the pending values reading them compute first.
#include <algorithm>
#include <functional>

#include "codegen/scheduler_impl.h"

namespace kiln::codegen::sched {

void Scheduler::eager(const Node& n, const std::string& why) {
  EagerStep s;
  s.node = &n;
  s.why = why;
  auto add_arg = [&](const Node* a) {
    Val& v = val(a);
    if (v.tensor) {
      materialize(v, "argument of eager " + n.name);
      s.tensor_args.push_back(v.view);
      s.tensor_sizes.push_back(v.sizes);
    } else {
      s.tensor_args.push_back(Access{});
      s.tensor_sizes.push_back({});
    }
    s.arg_nodes.push_back(a);
    s.arg_steps.push_back(v.tensor ? -1 : v.eager_step);
  };
  std::function<void(const Arg&)> walk = [&](const Arg& a) {
    if (a.kind == Arg::Kind::Node) add_arg(a.node);
    else if (a.kind == Arg::Kind::List)
      for (const Arg& i : a.items) walk(i);
  };
  for (const Arg& a : n.args) walk(a);
  for (const auto& kv : n.kwargs) walk(kv.second);
  if (n.op == NodeOp::CallFunction && runtime::op_def(OpId(n.op_id)).mutates) before_mutation(n, s);
  const int step = int(prog_.eager.size());
  Val v;
  if (n.meta) {
    Buffer b;
    b.kind = Buffer::Kind::Eager;
    b.index = step;
    b.dtype = n.meta->dtype;
    // A graph with symbols says what every size is (TensorMeta::sym). In
    // another program with dynamic sizes, an eager result's sizes may
    // follow them (cat of a dynamic input): every dim is read from the
    // result at call time.
    const bool dynamic_program = !prog_.syms.empty() && g_.symbols.empty();
    if (!g_.symbols.empty()) b.sizes = sizes_of(n);
    else for (size_t d = 0; d < n.meta->sizes.size(); ++d) {
      const bool dyn = dynamic_program || (d < n.meta->dynamic.size() && n.meta->dynamic[d]);
      if (dyn) {
        b.sizes.push_back(Dim::sym(int(prog_.syms.size())));
        prog_.syms.push_back({SymSource::From::Step, step, int(d)});
      } else {
        b.sizes.push_back(Dim::c(n.meta->sizes[d]));
      }
    }
    b.strides = contiguous(b.sizes);  // the runner makes the result contiguous
    s.result = add_buffer(b);
    v = materialized(s.result, b.sizes, b.strides, Dim::c(0), b.dtype);
  }
  v.eager_step = step;
  prog_.eager.push_back(std::move(s));
  prog_.steps.push_back({Step::Kind::Eager, step});
  val(&n) = std::move(v);
}

// An op that writes into its tensor arguments (batch_norm's running
// statistics) runs as an eager step, in graph order. A pending value that
// reads one of those buffers was made by an earlier node, so it must see
// the old contents: it is computed now, before the write. (A materialized
// view reads the memory when its consumer runs, after the write, as eager
// does.) In a program with dynamic sizes a failed check after an eager step
// reruns the whole graph eagerly, which would write twice: such a graph
// runs on the eager backend.
void Scheduler::before_mutation(const Node& n, const EagerStep& s) {
  if (!prog_.syms.empty())
    unsupported(std::string(runtime::op_def(OpId(n.op_id)).name) + " writes its arguments in a program with dynamic sizes");
  std::vector<int> written;
  for (const Access& a : s.tensor_args)
    if (a.buffer >= 0) written.push_back(a.buffer);
  auto reads = [&](const std::vector<Access>& accesses) {
    for (const Access& a : accesses)
      if (std::find(written.begin(), written.end(), a.buffer) != written.end()) return true;
    return false;
  };
  for (const auto& np : g_.nodes()) {
    const Node& m = *np;
    if (m.index >= n.index) break;
    Val& v = val(&m);
    if (!v.tensor || v.materialized || v.consumed) continue;
    // Only a value some later node still reads is live (an open reduction
    // belongs to its latest consumer).
    bool live = false;
    for (const Node* u : m.users) live = live || u->index > n.index;
    if (!live) continue;
    if (reads(v.arena.accesses) || (v.open >= 0 && reads(open_[size_t(v.open)].kernel.accesses)))
      materialize(v, "read before " + n.name + " writes its arguments");
  }
}

}  // namespace kiln::codegen::sched
