#include "codegen/attention_pattern.h"

#include <cmath>
#include <string>

#include "codegen/graph_match.h"
#include "runtime/tensor/ops.h"

namespace kiln::codegen {

using output_graph::Arg;
using output_graph::Node;
using output_graph::NodeOp;
using output_graph::TensorMeta;
using runtime::DType;
using runtime::OpId;
using runtime::Value;

namespace {

using match::arg;
using match::is_op;
using match::node_arg;
using match::number_arg;
using match::only_user;

bool same_dim(const TensorMeta& a, size_t da, const TensorMeta& b, size_t db) {
  if (a.sizes[da] != b.sizes[db]) return false;
  const bool sa = !a.sym.empty(), sb = !b.sym.empty();
  if (sa != sb) return !a.sym.empty() ? !a.sym[da].has_symbols() : !b.sym[db].has_symbols();
  return !sa || !(a.sym[da] != b.sym[db]);
}

bool same_shape(const TensorMeta& a, const TensorMeta& b) {
  if (a.sizes.size() != b.sizes.size()) return false;
  for (size_t d = 0; d < a.sizes.size(); ++d)
    if (!same_dim(a, d, b, d)) return false;
  return true;
}

// dim is the last of `rank` dims (-1 or rank - 1).
bool last_dim(double d, size_t rank) { return d == -1 || d == double(rank) - 1; }

// t is k.transpose(-2, -1) (any spelling of its last two dims): k.
const Node* transposed_source(const Node* t) {
  if (!is_op(t, OpId::transpose)) return nullptr;
  const size_t r = t->meta->sizes.size();
  double a = 0, b = 0;
  if (r < 2 || !number_arg(*t, 1, "dim0", a) || !number_arg(*t, 2, "dim1", b)) return nullptr;
  auto norm = [&](double d) { return d < 0 ? d + double(r) : d; };
  const double lo = std::min(norm(a), norm(b)), hi = std::max(norm(a), norm(b));
  return lo == double(r) - 2 && hi == double(r) - 1 ? node_arg(*t, 0, "input") : nullptr;
}

// The match ending in `out` (a matmul), if it is one.
bool match_at(const Node* out, AttentionMatch& m) {
  if (!is_op(out, OpId::matmul)) return false;
  const DType dt = out->meta->dtype;
  if (dt != DType::Float32 && dt != DType::Float64) return false;
  const Node* probs = node_arg(*out, 0, "input");
  const Node* v = node_arg(*out, 1, "other");
  if (!is_op(probs, OpId::softmax) || !v || !v->meta || !only_user(probs, out)) return false;
  const size_t r = probs->meta->sizes.size();
  double dim = 0;
  if (r < 2 || !number_arg(*probs, 1, "dim", dim) || !last_dim(dim, r)) return false;
  const Node* x = node_arg(*probs, 0, "input");
  if (!x || !x->meta || !only_user(x, probs)) return false;
  m = AttentionMatch{};
  m.out = out;
  m.absorbed = {probs};
  // The mask, if any; `scaled` is what it applies to.
  const Node* scaled = x;
  if (is_op(x, OpId::masked_fill)) {
    double fill = 0;
    const Node* drop = node_arg(*x, 1, "mask");
    if (!drop || !drop->meta || drop->meta->dtype != DType::Bool || !number_arg(*x, 2, "value", fill) ||
        !(std::isinf(fill) && fill < 0))
      return false;
    m.mask = drop, m.mask_drops = true;
    scaled = node_arg(*x, 0, "input");
  } else if (is_op(x, OpId::add)) {
    // The scores are the operand only this add reads, of the result's
    // shape; the other is the mask.
    const Node *a = node_arg(*x, 0, "input"), *b = node_arg(*x, 1, "other");
    auto scores_like = [&](const Node* t) {
      return t && t->meta && (is_op(t, OpId::matmul) || is_op(t, OpId::mul) || is_op(t, OpId::div)) &&
             only_user(t, x) && same_shape(*t->meta, *x->meta);
    };
    scaled = scores_like(a) ? a : scores_like(b) ? b : nullptr;
    m.mask = scaled == a ? b : a;
    if (!scaled || !m.mask || !m.mask->meta || m.mask->meta->dtype != dt || m.mask->meta->sizes.size() > r)
      return false;
  }
  if (m.mask) {
    m.absorbed.push_back(x);
    if (!scaled || !scaled->meta || !only_user(scaled, x) || !same_shape(*scaled->meta, *x->meta)) return false;
  }
  // The scale, if any.
  const Node* scores = scaled;
  double c = 0;
  if (is_op(scaled, OpId::mul) || is_op(scaled, OpId::div)) {
    const bool div = is_op(scaled, OpId::div);
    if (number_arg(*scaled, 1, "other", c) && c != 0) {
      scores = node_arg(*scaled, 0, "input");
      m.scale = div ? 1.0 / c : c;
    } else if (!div && number_arg(*scaled, 0, "input", c)) {
      scores = node_arg(*scaled, 1, "other");
      m.scale = c;
    } else {
      return false;
    }
    if (!scores || !only_user(scores, scaled)) return false;
    m.absorbed.push_back(scaled);
  }
  if (!is_op(scores, OpId::matmul) || scores->meta->dtype != dt || !same_shape(*scores->meta, *probs->meta))
    return false;
  m.absorbed.push_back(scores);
  m.q = node_arg(*scores, 0, "input");
  // k^T is absorbed too: scheduled, the view would take k's pending value
  // over, and the kernel reads k itself.
  const Node* kt = node_arg(*scores, 1, "other");
  m.k = transposed_source(kt);
  m.v = v;
  if (!m.q || !m.k || !m.q->meta || !m.k->meta || !only_user(kt, scores)) return false;
  m.absorbed.push_back(kt);
  // q, k, v: the scores' rank and batch dims, one dtype.
  for (const Node* t : {m.q, m.k, m.v}) {
    if (t->meta->dtype != dt || t->meta->sizes.size() != r) return false;
    for (size_t d = 0; d + 2 < r; ++d)
      if (!same_dim(*t->meta, d, *scores->meta, d)) return false;
  }
  return true;
}

}  // namespace

std::vector<AttentionMatch> find_attention(const output_graph::Graph& g) {
  std::vector<AttentionMatch> out;
  for (const auto& n : g.nodes()) {
    AttentionMatch m;
    if (match_at(n.get(), m)) out.push_back(std::move(m));
  }
  return out;
}

std::shared_ptr<Node> attention_node(const AttentionMatch& m) {
  auto n = std::make_shared<Node>();
  n->index = m.out->index;
  n->op = NodeOp::CallFunction;
  n->op_id = int(OpId::_flash_attention);
  n->name = m.out->name;
  n->target = "_flash_attention";
  n->meta = m.out->meta;
  n->args = {Arg::of(const_cast<Node*>(m.q)),
             Arg::of(const_cast<Node*>(m.k)),
             Arg::of(const_cast<Node*>(m.v)),
             m.mask ? Arg::of(const_cast<Node*>(m.mask)) : Arg::constant(Value::none()),
             Arg::constant(Value::boolean(false)),
             Arg::constant(Value::floating(m.scale)),
             Arg::constant(Value::boolean(m.mask_drops)),
             Arg::constant(Value::boolean(true))};
  return n;
}

}  // namespace kiln::codegen
