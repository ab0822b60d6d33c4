// What a convolution kernel applies to its output while it is still hot
// (issue 28): a per-channel affine map, an evaluation BatchNorm's
//   y = conv * scale[c] + shift[c]
// (scale = weight / sqrt(running_var + eps), shift = bias - running_mean *
// scale, computed by the graph on every call from the module's current
// tensors, so nothing here can go stale), then a residual added (a ResNet
// block's identity: y + residual, element by element), then one activation. Applied per
// output plane (depthwise) or per GEMM output block (the general path),
// instead of a separate pass of the graph's pointwise kernel over the whole
// output.
//
// Each activation is computed in the order of operations of kiln's eager
// rows and kiln.nn.functional (which follow torch's CPU kernels), so a
// fused result matches the unfused graph's to rounding; the float32
// AVX-512 path computes exp and erf with polynomials (relative error
// 1.2e-7 for exp, absolute 1.5e-7 for erf), the portable one with libm.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::runtime {

#define KILN_CONV_ACTIVATIONS(X) \
  X(None, "none")                \
  X(Relu, "relu")                \
  X(Relu6, "relu6")              \
  X(Hardswish, "hardswish")      \
  X(Hardsigmoid, "hardsigmoid")  \
  X(Silu, "silu")                \
  X(Gelu, "gelu")                \
  X(GeluTanh, "gelu_tanh")

enum class ConvActivation : uint8_t {
#define KILN_CONV_ACT_ENUM(e, s) e,
  KILN_CONV_ACTIVATIONS(KILN_CONV_ACT_ENUM)
#undef KILN_CONV_ACT_ENUM
};

const char* conv_activation_name(ConvActivation a);
// The activation named `name` (conv_activation_name's words); false if none is.
bool parse_conv_activation(const std::string& name, ConvActivation& out);

template <class T>
struct ConvEpilogue {
  const T* scale = nullptr;  // per output channel, or null (no affine map)
  const T* shift = nullptr;  // per output channel, or null (0)
  // A tensor of the output's shape, contiguous, or null; `out` is the
  // output's first element (data - out is where a call's elements are).
  const T* residual = nullptr;
  const T* out = nullptr;
  ConvActivation act = ConvActivation::None;
  bool active() const { return scale || shift || residual || act != ConvActivation::None; }
  // data[0, n): output elements of channel c, rewritten in place.
  void apply(int64_t c, T* data, int64_t n) const;
};

extern template struct ConvEpilogue<float>;
extern template struct ConvEpilogue<double>;

}  // namespace kiln::runtime
