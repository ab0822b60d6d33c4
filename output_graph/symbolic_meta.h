// The symbolic sizes of an op's result (issue 14): each row's SHAPE_RULE in
// runtime/tensor/ops.def has a symbolic counterpart here, `sym_<rule>`, derived
// from the same table, so a new rule without one does not compile.
//
// A rule runs after the concrete rule accepted the call at the hints (the
// traced example's sizes), so it never reports errors: it says what each
// result dimension is as a SymExpr of the inputs' sizes and arguments, and
// records in the ShapeEnv every relation the concrete rule relied on (two
// broadcast dimensions equal, a contraction's dimensions equal, where a
// slice's end falls). A rule that cannot say (an index with a data-
// dependent size, ceil-mode pooling) returns nothing; the caller then
// specializes the symbols involved.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "output_graph/symbolic_shapes.h"
#include "runtime/tensor/ops.h"
#include "runtime/value/tensor.h"
#include "runtime/value/value.h"

namespace kiln::output_graph {

using SymShape = std::vector<SymExpr>;

// One argument of a call, as its rule reads it.
struct SymArg {
  runtime::Value hint;  // the value at the hints: a meta tensor, a number, None, a str, a tuple
  SymShape shape;       // hint is a tensor: one expression per dimension
  SymExpr scalar;       // hint is an int: what it stands for (a constant unless symbolic)
  std::vector<SymArg> items;  // hint is a tuple or list: its items

  static SymArg tensor(const runtime::Tensor& meta, SymShape shape);
  static SymArg integer(SymExpr e, int64_t hint);
  // A constant: ints, bools, floats, None, strs, and tuples of those.
  static SymArg constant(const runtime::Value& v);
};

// The symbolic sizes of op(args, kwargs), whose concrete result at the
// hints has sizes `out_hint`; nothing when the op's rule cannot say.
std::optional<SymShape> symbolic_shape(runtime::OpId op, const std::vector<SymArg>& args,
                                       const std::vector<std::pair<std::string, SymArg>>& kwargs,
                                       const runtime::Shape& out_hint, ShapeEnv& env);

}  // namespace kiln::output_graph
