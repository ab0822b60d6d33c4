// Reading a graph's nodes for the scheduler's pattern passes
// (attention_pattern.h, conv_pattern.h): what a node is, its arguments by
// position or keyword, who reads it.
#pragma once

#include <algorithm>
#include <vector>

#include "output_graph/graph.h"
#include "runtime/tensor/ops.h"

namespace kiln::codegen::match {

using output_graph::Arg;
using output_graph::Node;
using output_graph::NodeOp;

// A call of `op` with a tensor result.
inline bool is_op(const Node* n, runtime::OpId op) {
  return n && n->op == NodeOp::CallFunction && n->op_id == int(op) && n->meta;
}

// Argument i of n, given positionally or by keyword.
inline const Arg* arg(const Node& n, size_t i, const char* name) {
  if (i < n.args.size()) return &n.args[i];
  for (const auto& [k, a] : n.kwargs)
    if (k == name) return &a;
  return nullptr;
}

inline const Node* node_arg(const Node& n, size_t i, const char* name) {
  const Arg* a = arg(n, i, name);
  return a && a->kind == Arg::Kind::Node ? a->node : nullptr;
}

// A number given as a constant (not a bool).
inline bool number_arg(const Node& n, size_t i, const char* name, double& out) {
  const Arg* a = arg(n, i, name);
  if (!a || a->kind != Arg::Kind::Const || !a->value.is_number() || a->value.is(runtime::Kind::Bool)) return false;
  out = a->value.as_number();
  return true;
}

// The distinct nodes reading n (a node lists a user once per use).
inline std::vector<const Node*> users_of(const Node* n) {
  std::vector<const Node*> u(n->users.begin(), n->users.end());
  std::sort(u.begin(), u.end());
  u.erase(std::unique(u.begin(), u.end()), u.end());
  return u;
}

// `user` is the only node reading n.
inline bool only_user(const Node* n, const Node* user) {
  if (n->users.empty()) return false;
  for (const Node* u : n->users)
    if (u != user) return false;
  return true;
}

}  // namespace kiln::codegen::match
