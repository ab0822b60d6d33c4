// A seeded generator of random, well-formed KBC programs for differential
// testing of the tracer against the VM.
//
// Each program has the shape of the tracer corpus (tests/corpus/tracer):
//   .func inputs()   builds the arguments: manual_seed, then a few float
//                    tensors of one shape (R, C), an int and a float
//   .func f(...)     the function under test
//   .func main()     return f(*inputs())   (CALL_EX)
// plus helper functions h0, h1, ... that f (and later helpers) call.
//
// f is straight-line tensor arithmetic over those tensors and Python
// scalars (every tensor shape stays in the broadcast-compatible family
// (R|1, C|1) or 0-d, so every pointwise op is legal), reductions with
// keepdim, softmax / layer_norm, square matmul, slicing views, Python int
// arithmetic, if/else on Python ints, bounded for-loops over range(k)
// (k <= 4), calls to helpers (never recursive), and, when the options ask,
// print() calls, branches on a tensor's value and .item() reads: the three
// common graph breaks. It returns a nested tuple of tensors and ints.
//
// Guarantees: the same seed and options give the same text on every
// platform (a self-contained SplitMix64, no std distributions); the
// program assembles, verifies and runs on the VM without error and
// terminates; divisions are by (abs(t) + 1.0) or by non-zero literals,
// logarithms and square roots take abs() first, int division and modulo
// are by positive literals.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::test {

struct GeneratorOptions {
  int num_inputs = 3;          // float tensors passed to f (1..4), all of shape (R, C)
  int min_statements = 4;      // top-level statements in f
  int max_statements = 12;
  int max_helpers = 2;         // helper functions h0..h{n-1} (0..this)
  int max_loop_trip = 4;       // for i in range(k): 1 <= k <= max_loop_trip (clamped to 1..4)
  int max_expr_depth = 3;      // nesting of tensor expressions
  bool reductions = true;      // sum/mean/amax (keepdim), softmax, layer_norm
  bool matmul = true;          // @ and .T when the shape is square
  bool views = true;           // x[a:a+1], x[:, a:a+1]
  bool prints = false;         // print(...): side_effect_builtin breaks
  bool tensor_branches = false;  // if t.sum() > 0: data_dependent_branch breaks
  bool item_reads = false;     // float reads via .item(): tensor_to_python breaks
};

// The options with every kind of graph break switched on.
GeneratorOptions generator_options_with_breaks();

// A complete .kbc program (inputs, helpers, f, main) for `seed`.
std::string generate_program(uint64_t seed, const GeneratorOptions& options = {});

}  // namespace kiln::test
