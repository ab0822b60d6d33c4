// Writes into tensors through views, functionalized (Dynamo's
// functionalization, in the small). A graph is pure: `x[k] = v`,
// `x.zero_()` and `x += y` become a new node that x's tracker now denotes.
// When x shares memory with other tensors of the trace (x is a view, or
// views were taken of x), torch's program sees the write through all of
// them, so every one of those trackers must denote its new value too:
//
//   swin v2:   b = qkv_bias.clone(); b[n:2 * n].zero_(); F.linear(x, w, b)
//   ghostnet:  x = out[:, :c]; x += shortcut(s)
//
// The memory belongs to a node this graph made (the alias root: an op
// that returns fresh storage). A write of value W into view V = s_k(...
// s_1(root)) is carried back down the steps (a slice or select becomes a
// setitem of its parent, a transpose or permute its inverse, a reshape the
// parent's shape), giving root'; the root's tracker then denotes root',
// and every live view of the root is taken again from root' by its own
// steps. Nothing changes until every new node is made: a step kiln cannot
// invert or replay (expand, a reshape that copied, contiguous/to, which
// may or may not alias, a symbolic slice bound) refuses the whole write,
// and the graph breaks there (CPython then writes into real tensors).
#include "interpreter/tensor_views.h"

#include <algorithm>

#include "interpreter/instruction_translator.h"
#include "runtime/semantics/value_ops.h"
#include "variables/wrap.h"

namespace kiln::interpreter {

using namespace kiln::runtime;
using output_graph::Arg;
using output_graph::Node;
using output_graph::NodeOp;
namespace vars = kiln::variables;
using vars::make_constant;

bool may_alias(const Node* m) {
  if (m->op != NodeOp::CallFunction) return false;
  const OpDef& d = op_def(OpId(m->op_id));
  return d.kind == OpKind::View || d.id == OpId::contiguous || d.id == OpId::to;
}

const Node* alias_root(const Node* m) {
  while (may_alias(m) && !m->args.empty() && m->args[0].kind == Arg::Kind::Node) m = m->args[0].node;
  return m;
}

namespace {

// Argument `i` of a view node, or its keyword `name`: a constant, else
// Null (symbolic, or absent: the op's default then applies).
Value const_arg(const Node* n, size_t i, std::string_view name) {
  const Arg* a = i < n->args.size() ? &n->args[i] : nullptr;
  for (const auto& [k, v] : n->kwargs)
    if (k == name) a = &v;
  if (!a || a->kind != Arg::Kind::Const) return Value::null();
  return a->value;
}

bool all_constant(const Node* n) {
  for (size_t i = 1; i < n->args.size(); ++i)
    if (n->args[i].kind == Arg::Kind::Node || n->args[i].kind == Arg::Kind::Sym ||
        (n->args[i].kind == Arg::Kind::List &&
         std::any_of(n->args[i].items.begin(), n->args[i].items.end(),
                     [](const Arg& a) { return a.kind != Arg::Kind::Const; })))
      return false;
  for (const auto& kv : n->kwargs)
    if (kv.second.kind != Arg::Kind::Const) return false;
  return true;
}

bool contiguous(const Node* n) { return n->meta->strides == contiguous_strides(n->meta->sizes); }

// Whether a write through view step `n` can be carried back to its parent
// (and the step replayed on a new parent): "" when it can, else why not.
std::string step_refusal(const Node* n) {
  const OpId op = OpId(n->op_id);
  if (n->args.empty() || n->args[0].kind != Arg::Kind::Node) return "a view of no tensor";
  if (!all_constant(n)) return std::string(op_def(op).name) + " with a bound known only when the graph runs";
  switch (op) {
    case OpId::slice:
    case OpId::select:
    case OpId::transpose:
    case OpId::permute:
    case OpId::unsqueeze:
    case OpId::squeeze: return "";
    case OpId::view:
    case OpId::reshape:
    case OpId::flatten:
      // A reshape of a tensor that is not contiguous is a copy (torch's
      // reshape), which a write does not reach through.
      return contiguous(n->args[0].node) ? "" : "a reshape that copied";
    default: return std::string(op_def(op).name) + ", which kiln does not write back through";
  }
}

}  // namespace

void InstructionTranslator::note_view(const VT& r, const VT& input) {
  const Node* root = alias_root(r->node);
  ctx_.views_of[root].push_back(r);
  if (input && input->is(VTKind::Tensor) && input->node == root) ctx_.viewed_tracker[root] = input;
}

namespace {

// The steps from the alias root down to `n`, root first (empty: n is a
// root); "" when every step can be written back through, else why not.
std::string view_steps(const Node* n, const Node*& root, std::vector<const Node*>& steps) {
  steps.clear();
  while (may_alias(n)) {
    if (std::string why = step_refusal(n); !why.empty()) return why;
    steps.push_back(n);
    n = n->args[0].node;
  }
  std::reverse(steps.begin(), steps.end());
  root = n;
  if (n->op != NodeOp::CallFunction) return "a view of a graph input";
  return "";
}

// The new value of step `s`'s parent once the view `s` makes of it holds
// `w`: a slice or select written into the parent (setitem), a transpose,
// permute or unsqueeze undone, a reshape back to the parent's shape. The
// result is a fresh node or a view of one that later writes can reach
// through again.
VT write_back(InstructionTranslator& tx, const Node* s, VT w) {
  VT parent = vars::make_tensor(s->args[0].node);
  const int64_t rank = int64_t(parent->meta().sizes.size());
  auto dim_of = [&](size_t index, std::string_view name, int64_t dflt) {
    const Value d = const_arg(s, index, name);
    const int64_t v = d.is(Kind::Int) ? d.as_int() : dflt;
    return v < 0 ? v + rank : v;
  };
  auto whole_dims = [&](int64_t dims) {
    std::vector<VT> key;
    const Value all = make_slice(Value::none(), Value::none(), Value::none());
    for (int64_t d = 0; d < dims; ++d) key.push_back(make_constant(all));
    return key;
  };
  switch (OpId(s->op_id)) {
    case OpId::slice: {
      std::vector<VT> key = whole_dims(dim_of(1, "dim", 0));
      const Value start = const_arg(s, 2, "start"), stop = const_arg(s, 3, "end"), step = const_arg(s, 4, "step");
      auto given = [](const Value& v) { return v.is_null() ? Value::none() : v; };
      key.push_back(make_constant(make_slice(given(start), given(stop), given(step))));
      w = tx.tensor_op(OpId::setitem, {parent, vars::make_tuple(std::move(key)), w});
      break;
    }
    case OpId::select: {
      std::vector<VT> key = whole_dims(dim_of(1, "dim", 0));
      key.push_back(make_constant(const_arg(s, 2, "index")));
      w = tx.tensor_op(OpId::setitem, {parent, vars::make_tuple(std::move(key)), w});
      break;
    }
    case OpId::transpose:
      w = tx.tensor_op(OpId::transpose,
                       {w, make_constant(const_arg(s, 1, "dim0")), make_constant(const_arg(s, 2, "dim1"))});
      break;
    case OpId::permute: {
      // permute(x, dims) takes dims positionally (*dims) or as one list.
      std::vector<int64_t> dims;
      for (size_t a = 1; a < s->args.size(); ++a) {
        const Arg& arg = s->args[a];
        if (arg.kind == Arg::Kind::List)
          for (const Arg& item : arg.items) dims.push_back(item.value.as_int());
        else if (arg.value.is(Kind::Int)) dims.push_back(arg.value.as_int());
        else for (const Value& item : to_vector(arg.value)) dims.push_back(item.as_int());
      }
      std::vector<VT> inverse(dims.size());
      for (size_t d = 0; d < dims.size(); ++d)
        inverse[size_t(dims[d] < 0 ? dims[d] + rank : dims[d])] = make_constant(Value::integer(int64_t(d)));
      std::vector<VT> args{w};
      args.insert(args.end(), inverse.begin(), inverse.end());
      w = tx.tensor_op(OpId::permute, args);
      break;
    }
    case OpId::unsqueeze: {  // squeezed again: a view whatever w's layout
      const Value d = const_arg(s, 1, "dim");
      const int64_t dim = d.as_int() < 0 ? d.as_int() + rank + 1 : d.as_int();
      w = tx.tensor_op(OpId::squeeze, {w, make_constant(Value::integer(dim))});
      break;
    }
    default: {  // squeeze, view, reshape, flatten: the parent's shape again
      // A reshape of w is a view of it only when w is contiguous (else it
      // copies, and a later write through it would not reach w): a copy
      // of w first then, which is the memory's new owner.
      if (!contiguous(w->node)) w = tx.tensor_op(OpId::clone, {w});
      std::vector<VT> args{w};
      for (size_t d = 0; d < size_t(rank); ++d) args.push_back(tx.size_of(parent, d));
      w = tx.tensor_op(OpId::reshape, args);
    }
  }
  return w;
}

}  // namespace

bool InstructionTranslator::assign_tensor(const VT& x, const VT& value) {
  const Node* root = nullptr;
  std::vector<const Node*> steps;
  view_refusal_ = view_steps(x->node, root, steps);
  if (!view_refusal_.empty()) return false;
  // The other trackers over root's memory: the views still alive, each
  // with its own steps (x among them when it is a view), and root's own.
  struct Live {
    VT view;
    std::vector<const Node*> steps;
  };
  std::vector<Live> live;
  if (auto it = ctx_.views_of.find(root); it != ctx_.views_of.end()) {
    auto& views = it->second;
    views.erase(std::remove_if(views.begin(), views.end(), [](const auto& w) { return w.expired(); }), views.end());
    for (const auto& w : views) {
      VT v = w.lock();
      const Node* its_root = nullptr;
      Live l{v, {}};
      // A tracker written since it was a view denotes something else now.
      if (alias_root(v->node) != root) continue;
      view_refusal_ = view_steps(v->node, its_root, l.steps);
      if (!view_refusal_.empty()) {
        view_refusal_ = "another view of the tensor is " + view_refusal_;
        return false;
      }
      live.push_back(std::move(l));
    }
  }
  // x itself, if no op recorded it (every view op goes through tensor_op).
  if (!steps.empty() && std::none_of(live.begin(), live.end(), [&](const Live& l) { return l.view == x; }))
    live.push_back(Live{x, steps});
  // A write that views share, into memory whose values record gradients:
  // the embedder's autograd would have to see it as one (a write into a
  // tensor with no view is a new value like any op's, as before).
  if (root->requires_grad && !live.empty()) {
    view_refusal_ = "a tensor that records gradients";
    return false;
  }
  VT owner = steps.empty() ? x : nullptr;
  if (!owner)
    if (auto it = ctx_.viewed_tracker.find(root); it != ctx_.viewed_tracker.end())
      if (VT t = it->second.lock(); t && t->node == root) owner = t;

  // root' : the value written back down the steps, last step first, laid
  // out as the root was: the views are taken again from it by their own
  // steps, and their layout (a reshape that copies or not, stride(),
  // is_contiguous()) must stay torch's. A root laid out otherwise than
  // contiguously is left to CPython.
  VT w = value;
  for (size_t i = steps.size(); i-- > 0;) w = write_back(*this, steps[i], w);
  if (w->meta().strides != root->meta->strides) {
    if (!contiguous(root)) {
      view_refusal_ = "a tensor not laid out contiguously";
      return false;
    }
    w = tensor_op(OpId::clone, {w});
  }
  // Every live view taken again from root', by its own steps (replayed as
  // they were recorded, with the new parent first).
  std::vector<Node*> retaken;
  for (const Live& l : live) {
    VT v = w;
    for (const Node* s : l.steps) {
      std::vector<Arg> args = s->args;
      args[0] = Arg::of(v->node);
      v = vars::wrap_fx_proxy(ctx_.out, OpId(s->op_id), std::move(args), s->kwargs);
    }
    retaken.push_back(v->node);
  }
  // Now every tracker moves at once. root' may itself be a view of a
  // fresh node (a reshape or transpose that undid x's last step): the
  // memory is that node's, and the owner is one more view of it.
  const Node* new_root = alias_root(w->node);
  auto& views = ctx_.views_of[new_root];
  if (owner) {
    owner->node = w->node;
    if (w->node == new_root) ctx_.viewed_tracker[new_root] = owner;
    else views.push_back(owner);
  }
  for (size_t i = 0; i < live.size(); ++i) {
    live[i].view->node = retaken[i];
    views.push_back(live[i].view);
  }
  return true;
}

}  // namespace kiln::interpreter
