// Hand-written attention, found in a graph so the scheduler can run it as
// one call of the tiled kernel (runtime/kernels/attention.h) instead of a [L, S]
// score matrix written, softmaxed and read back:
//
//   scores = q @ k.transpose(-2, -1)            matmul of a transpose
//   scores = scores * c  |  scores / c          optional, c a number
//   scores = scores.masked_fill(drop, -inf)     optional, drop a bool tensor
//          | scores + mask                      or a float mask of its dtype
//   probs  = softmax(scores, dim=-1)            (eval dropout is no node)
//   out    = probs @ v
//
// nanoGPT's and BERT's self-attention are this. Each intermediate node has
// the next as its only user (nothing else may see the scores), q, k and v
// have equal batch dims, the mask does not grow the scores' shape, and the
// dtype is float32 or float64. A fully masked row stays NaN, as softmax
// gives (empty_rows_nan), unlike scaled_dot_product_attention's zeros.
#pragma once

#include <memory>
#include <vector>

#include "output_graph/graph.h"

namespace kiln::codegen {

struct AttentionMatch {
  const output_graph::Node* out = nullptr;  // the final matmul
  const output_graph::Node *q = nullptr, *k = nullptr, *v = nullptr, *mask = nullptr;
  double scale = 1.0;
  bool mask_drops = false;  // masked_fill's bool mask (true: drop)
  std::vector<const output_graph::Node*> absorbed;  // k^T, the scores, scaled, masked and softmax nodes
};

// Every match in the graph, in graph order.
std::vector<AttentionMatch> find_attention(const output_graph::Graph& g);

// A _flash_attention call computing m.out (its index, name and meta): the
// node an eager step runs. Not in any graph; the program keeps it alive.
std::shared_ptr<output_graph::Node> attention_node(const AttentionMatch& m);

}  // namespace kiln::codegen
