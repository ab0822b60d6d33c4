// A 2-d convolution followed by an evaluation BatchNorm and/or an
// activation, found in a graph so the scheduler runs the chain as one call
// of _conv2d_act (runtime/tensor/ops.def): the convolution applies the
// BatchNorm's per-channel affine map and the activation to each output
// plane while it is in cache, instead of a pointwise kernel's separate
// pass over the whole output (issue 28). The graph shapes it matches:
//
//   c  = conv2d(x, w, bias, ...)                     4-D, float32/float64
//   y  = add(mul(c, reshape(scale, [-1, 1, 1])),     batch_norm_parts in eval
//            reshape(shift, [-1, 1, 1]))             (optional)
//   y  = add(y, residual)                            a tensor of y's shape and
//                                                    dtype: a ResNet block's
//                                                    identity (optional)
//   r  = relu(y) | clamp_max(clamp_min(y, 0), 6)                  relu, relu6
//      | div(mul(y, clamp_max(clamp_min(add(y, 3), 0), 6)), 6)    hardswish
//      | div(clamp_max(clamp_min(add(y, 3), 0), 6), 6)            hardsigmoid
//      | mul(y, sigmoid(y)) | gelu(y) | _gelu_tanh(y)             silu, gelu
//   out = setitem(y, [:, :, :, :], r)               an inplace=True activation
//                                                   (optional)
//
// Every intermediate node is read only inside the chain (nothing else may
// see c or y), scale and shift are 1-D of the output's channels and dtype.
//
// Parameters are never folded into the weights at compile time: scale and
// shift stay graph values computed from the BatchNorm's tensors on every
// call (a few per-channel operations), so a parameter or running statistic
// changed in place between calls (load_state_dict, `bn.running_var.fill_`,
// `conv.weight.data.mul_`) is seen as eager sees it, with no guard to keep.
// Training-mode BatchNorm is the batch_norm op itself and never matches.
#pragma once

#include <memory>
#include <vector>

#include "output_graph/graph.h"
#include "runtime/kernels/conv_epilogue.h"

namespace kiln::codegen {

struct ConvMatch {
  const output_graph::Node* out = nullptr;   // the chain's last node
  const output_graph::Node* conv = nullptr;  // its conv2d
  const output_graph::Node *scale = nullptr, *shift = nullptr;  // the BatchNorm's [C] values, or null
  const output_graph::Node* residual = nullptr;                  // added before the activation, or null
  runtime::ConvActivation act = runtime::ConvActivation::None;
  std::vector<const output_graph::Node*> absorbed;  // every node of the chain but `out`
};

// Every match in the graph, in graph order.
std::vector<ConvMatch> find_conv_epilogues(const output_graph::Graph& g);

// The _conv2d_act call computing m.out (its index, name and meta), for an
// eager step. Not in any graph; the program keeps it alive.
std::shared_ptr<output_graph::Node> conv_epilogue_node(const ConvMatch& m);

}  // namespace kiln::codegen
