// Which graph nodes may share memory with another: the facts the tracer's
// writes into tensors rest on (translator_views.cpp).
#pragma once

#include "output_graph/graph.h"

namespace kiln::interpreter {

// A node whose result may share memory with its first argument: a view op,
// or contiguous/to (which return their input when there is nothing to do).
bool may_alias(const output_graph::Node* m);

// The node owning the memory an aliasing node reads through.
const output_graph::Node* alias_root(const output_graph::Node* m);

}  // namespace kiln::interpreter
