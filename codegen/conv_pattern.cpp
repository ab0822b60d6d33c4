#include "codegen/conv_pattern.h"

#include <algorithm>
#include <string>

#include "codegen/graph_match.h"
#include "runtime/tensor/ops.h"

namespace kiln::codegen {

using output_graph::Arg;
using output_graph::Node;
using output_graph::NodeOp;
using runtime::ConvActivation;
using runtime::DType;
using runtime::OpId;
using runtime::Value;

namespace {

using match::arg;
using match::node_arg;
using match::number_arg;
using match::only_user;
using match::users_of;

// A call of `op` whose value records no gradients (the scheduler's graphs
// run without autograd; a node that requires grad is left alone).
bool is_op(const Node* n, OpId op) { return match::is_op(n, op) && !n->requires_grad; }

bool number_is(const Node& n, size_t i, const char* name, double want) {
  double v = 0;
  return number_arg(n, i, name, v) && v == want;
}

// A binary op with `x` as one operand: the other operand's node (null if
// it is not a node).
const Node* other_operand(const Node& n, const Node* x) {
  const Node *a = node_arg(n, 0, "input"), *b = node_arg(n, 1, "other");
  if (a == x) return b;
  if (b == x) return a;
  return nullptr;
}

// v is reshape(t, [-1, 1, 1]) of a 1-D t of `channels` elements in `dt`: t.
const Node* per_channel(const Node* v, int64_t channels, DType dt) {
  if (!is_op(v, OpId::reshape) || v->meta->sizes != std::vector<int64_t>{channels, 1, 1}) return nullptr;
  const Node* t = node_arg(*v, 0, "input");
  if (!t || !t->meta || t->requires_grad || t->meta->dtype != dt || t->meta->sizes != std::vector<int64_t>{channels})
    return nullptr;
  return t;
}

// clamp_max(clamp_min(x, 0), 6) with every node read once: the clamp_max.
const Node* clamp06_of(const Node* x, const Node* cmin) {
  if (!is_op(cmin, OpId::clamp_min) || node_arg(*cmin, 0, "input") != x || !number_is(*cmin, 1, "min", 0.0))
    return nullptr;
  const std::vector<const Node*> u = users_of(cmin);
  if (u.size() != 1 || !is_op(u[0], OpId::clamp_max) || !number_is(*u[0], 1, "max", 6.0)) return nullptr;
  return u[0];
}

// div(v, 6) as v's only user: the div.
const Node* div6_of(const Node* v) {
  const std::vector<const Node*> u = users_of(v);
  if (u.size() != 1 || !is_op(u[0], OpId::div) || node_arg(*u[0], 0, "input") != v || !number_is(*u[0], 1, "other", 6.0))
    return nullptr;
  return u[0];
}

// add(y, 3) -> clamp 0..6: the clamp_max, the add and clamp_min absorbed.
const Node* hard_gate(const Node* y, const Node* add3, std::vector<const Node*>& absorbed) {
  if (!is_op(add3, OpId::add) || node_arg(*add3, 0, "input") != y || !number_is(*add3, 1, "other", 3.0)) return nullptr;
  const std::vector<const Node*> u = users_of(add3);
  if (u.size() != 1) return nullptr;
  const Node* cmax = clamp06_of(add3, u[0]);
  if (!cmax) return nullptr;
  absorbed.insert(absorbed.end(), {add3, u[0]});
  return cmax;
}

// Whether key (setitem's) selects the whole of a rank-4 tensor.
bool whole_key(const Arg* key) {
  if (!key) return false;
  auto full = [](const Value& v) {
    if (!v.is(runtime::Kind::Slice)) return false;
    const auto* s = v.as<runtime::SliceObj>();
    return s->start.is_none() && s->stop.is_none() && s->step.is_none();
  };
  std::vector<Value> items;
  if (key->kind == Arg::Kind::List) {
    for (const Arg& i : key->items) {
      if (i.kind != Arg::Kind::Const) return false;
      items.push_back(i.value);
    }
  } else if (key->kind == Arg::Kind::Const && key->value.is(runtime::Kind::Tuple)) {
    const auto* t = key->value.as<runtime::TupleObj>();
    items.assign(t->items.begin(), t->items.end());
  } else if (key->kind == Arg::Kind::Const) {
    items.push_back(key->value);
  } else {
    return false;
  }
  if (items.empty() || items.size() > 4) return false;
  for (const Value& v : items)
    if (!full(v)) return false;
  return true;
}

// The activation applied to y, whose distinct users are `u` (the setitem
// of an in-place activation excluded): its last node, and the activation.
const Node* activation_of(const Node* y, const std::vector<const Node*>& u, ConvActivation& act,
                          std::vector<const Node*>& absorbed) {
  if (u.size() == 1) {
    const Node* a = u[0];
    if (is_op(a, OpId::relu) && node_arg(*a, 0, "input") == y) return act = ConvActivation::Relu, a;
    if (is_op(a, OpId::gelu) && node_arg(*a, 0, "input") == y) {
      const Arg* approx = arg(*a, 1, "approximate");
      if (approx && !(approx->kind == Arg::Kind::Const && approx->value.is(runtime::Kind::Str) &&
                      approx->value.as_str() == "none"))
        return nullptr;
      return act = ConvActivation::Gelu, a;
    }
    if (is_op(a, OpId::_gelu_tanh) && node_arg(*a, 0, "input") == y) return act = ConvActivation::GeluTanh, a;
    if (const Node* cmax = clamp06_of(y, a)) {
      absorbed.push_back(a);
      return act = ConvActivation::Relu6, cmax;
    }
    std::vector<const Node*> gate;
    if (const Node* cmax = hard_gate(y, a, gate))
      if (const Node* d = div6_of(cmax)) {
        absorbed.insert(absorbed.end(), gate.begin(), gate.end());
        absorbed.push_back(cmax);
        return act = ConvActivation::Hardsigmoid, d;
      }
    return nullptr;
  }
  if (u.size() != 2) return nullptr;
  // silu: mul(y, sigmoid(y)); hardswish: div(mul(y, gate(y)), 6).
  for (int i = 0; i < 2; ++i) {
    const Node *first = u[size_t(i)], *second = u[size_t(1 - i)];
    if (is_op(first, OpId::sigmoid) && node_arg(*first, 0, "input") == y && only_user(first, second) &&
        is_op(second, OpId::mul) && other_operand(*second, y) == first) {
      absorbed.push_back(first);
      return act = ConvActivation::Silu, second;
    }
    std::vector<const Node*> gate;
    if (const Node* cmax = hard_gate(y, first, gate)) {
      if (!only_user(cmax, second) || !is_op(second, OpId::mul) || other_operand(*second, y) != cmax) continue;
      const Node* d = div6_of(second);
      if (!d) continue;
      absorbed.insert(absorbed.end(), gate.begin(), gate.end());
      absorbed.insert(absorbed.end(), {cmax, second});
      return act = ConvActivation::Hardswish, d;
    }
  }
  return nullptr;
}

bool match_from(const Node* conv, ConvMatch& m) {
  if (!is_op(conv, OpId::conv2d)) return false;
  const auto& meta = *conv->meta;
  if (meta.sizes.size() != 4 || (meta.dtype != DType::Float32 && meta.dtype != DType::Float64)) return false;
  for (const auto& s : meta.sym)
    if (s.has_symbols()) return false;
  const Node* x = node_arg(*conv, 0, "input");
  if (!x || !x->meta || x->meta->sizes.size() != 4) return false;
  const int64_t channels = meta.sizes[1];
  m = ConvMatch{};
  m.conv = conv;
  m.absorbed = {conv};
  const Node* y = conv;  // what the activation reads
  std::vector<const Node*> u = users_of(conv);
  // The BatchNorm's parts: add(mul(c, reshape(scale)), reshape(shift)).
  if (u.size() == 1 && is_op(u[0], OpId::mul)) {
    const Node* mul = u[0];
    const Node* rs = other_operand(*mul, conv);
    const Node* scale = per_channel(rs, channels, meta.dtype);
    const std::vector<const Node*> mu = users_of(mul);
    if (scale && only_user(rs, mul) && mu.size() == 1 && is_op(mu[0], OpId::add)) {
      const Node* add = mu[0];
      const Node* rb = other_operand(*add, mul);
      const Node* shift = per_channel(rb, channels, meta.dtype);
      if (shift && only_user(rb, add) && add->meta->sizes == meta.sizes && add->meta->dtype == meta.dtype) {
        m.scale = scale, m.shift = shift;
        m.absorbed.insert(m.absorbed.end(), {rs, mul, rb});
        y = add;
        u = users_of(add);
      }
    }
  }
  // A residual: add(y, r), r another tensor of y's shape (no broadcast).
  if (u.size() == 1 && is_op(u[0], OpId::add) && u[0]->meta->sizes == meta.sizes && u[0]->meta->dtype == meta.dtype) {
    const Node* add = u[0];
    const Node* res = other_operand(*add, y);
    if (res && res != y && res->meta && !res->requires_grad && res->meta->sizes == meta.sizes &&
        res->meta->dtype == meta.dtype) {
      m.residual = res;
      if (y != conv) m.absorbed.push_back(y);
      y = add;
      u = users_of(add);
    }
  }
  // An in-place activation: y's users are the activation's nodes and
  // setitem(y, whole, r) with r read by nothing else.
  const Node* setitem = nullptr;
  for (const Node* n : u)
    if (is_op(n, OpId::setitem) && node_arg(*n, 0, "input") == y && whole_key(arg(*n, 1, "key")) &&
        n->meta->sizes == meta.sizes && n->meta->dtype == meta.dtype)
      setitem = n;
  if (setitem) u.erase(std::find(u.begin(), u.end(), setitem));
  std::vector<const Node*> act_nodes;
  const Node* r = u.empty() ? nullptr : activation_of(y, u, m.act, act_nodes);
  if (setitem && (!r || node_arg(*setitem, 2, "value") != r || !only_user(r, setitem))) return false;
  if (!r && u.empty() && !setitem) return false;  // y is a graph output read by nothing (not a node's user)
  if (r && (r->meta->sizes != meta.sizes || r->meta->dtype != meta.dtype)) return false;
  if (!r) {
    // No activation: worth it only with a BatchNorm or a residual (conv
    // alone is conv).
    if (!m.scale && !m.residual) return false;
    m.out = y;
    return true;
  }
  if (y != conv) m.absorbed.push_back(y);
  m.absorbed.insert(m.absorbed.end(), act_nodes.begin(), act_nodes.end());
  if (setitem) {
    m.absorbed.push_back(r);
    m.out = setitem;
  } else {
    m.out = r;
  }
  return true;
}

}  // namespace

std::vector<ConvMatch> find_conv_epilogues(const output_graph::Graph& g) {
  std::vector<ConvMatch> out;
  for (const auto& n : g.nodes()) {
    ConvMatch m;
    if (match_from(n.get(), m)) out.push_back(std::move(m));
  }
  return out;
}

std::shared_ptr<Node> conv_epilogue_node(const ConvMatch& m) {
  auto n = std::make_shared<Node>();
  n->index = m.out->index;
  n->op = NodeOp::CallFunction;
  n->op_id = int(OpId::_conv2d_act);
  n->name = m.out->name;
  n->target = "_conv2d_act";
  n->meta = m.out->meta;
  n->args = m.conv->args;
  n->kwargs = m.conv->kwargs;
  n->kwargs.emplace_back("scale", m.scale ? Arg::of(const_cast<Node*>(m.scale)) : Arg::constant(Value::none()));
  n->kwargs.emplace_back("shift", m.shift ? Arg::of(const_cast<Node*>(m.shift)) : Arg::constant(Value::none()));
  n->kwargs.emplace_back("activation", Arg::constant(Value::str(runtime::conv_activation_name(m.act))));
  if (m.residual) n->kwargs.emplace_back("residual", Arg::of(const_cast<Node*>(m.residual)));
  return n;
}

}  // namespace kiln::codegen
