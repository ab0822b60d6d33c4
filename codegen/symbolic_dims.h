// The sizes, strides and offsets of a program whose graph has symbolic
// sizes (issue 14), as codegen Dims.
//
// A Dim is a monomial over the program's symbols (kernel_ir.h), which is
// what loops and strides need, and what lowering folds or loads. The
// graph's sizes are polynomials (output_graph::SymExpr): a slice's length
// s1 - 4, a select's offset (s1 - 1)*C. SymDims keeps the two apart: a
// polynomial becomes its content (the largest monomial dividing it) times
// a derived symbol standing for the rest, evaluated once per call
// (SymSource::From::Expr); the same rest is always the same symbol, so Dims
// that are equal as polynomials compare equal as Dims.
//
// Program symbols 0..G-1 are the graph's symbols (Graph::symbols), in
// order, so a SymExpr of the graph is one over program symbols as it is.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "codegen/kernel_ir.h"

namespace kiln::codegen {

class SymDims {
 public:
  explicit SymDims(Program& prog) : prog_(prog) {}

  Dim of(const output_graph::SymExpr& e);
  Dims of(const std::vector<output_graph::SymExpr>& es);
  // The polynomial a Dim stands for (derived symbols expanded).
  output_graph::SymExpr expr(const Dim& d) const;
  Dim add(const Dim& a, const Dim& b) { return of(expr(a) + expr(b)); }

 private:
  Program& prog_;
  std::map<std::string, int> derived_;  // canonical form of a rest -> its symbol
};

// The strides of `sizes` viewing memory laid out as (old_sizes,
// old_strides) without a copy, as torch's view computes them, over
// symbolic Dims; None when no strides can say it (a copy is needed).
std::optional<Dims> view_strides(const Dims& old_sizes, const Dims& old_strides, const Dims& sizes);

}  // namespace kiln::codegen
