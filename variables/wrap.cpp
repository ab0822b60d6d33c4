#include "variables/wrap.h"

#include "runtime/nn/module.h"
#include "variables/builder.h"

namespace kiln::variables {

VT wrap_fx_proxy(output_graph::OutputGraph& out, runtime::OpId op, std::vector<output_graph::Arg> args,
                 std::vector<std::pair<std::string, output_graph::Arg>> kwargs) {
  return make_tensor(out.create_call(op, std::move(args), std::move(kwargs)));
}

runtime::Tensor grad_tensor_view(const runtime::Value& v) {
  if (!v.is(runtime::Kind::Foreign)) return runtime::Tensor();
  const auto* f = v.as<runtime::ForeignObj>();
  return f->vt->grad_tensor ? f->vt->grad_tensor(f->handle) : runtime::Tensor();
}

VT register_attr_or_module(output_graph::OutputGraph& out, const runtime::Value& value, const VT& owner,
                           const std::string& name, const SourceRef& source) {
  if (value.is_none()) return make_constant(runtime::Value::none());
  if (value.is(runtime::Kind::Tensor)) {
    return make_tensor(out.register_attr(value, module_path_link(out, *owner), name), source);
  }
  if (runtime::Tensor view = grad_tensor_view(value); view.defined()) {
    // The embedder's parameter that requires grad (a torch Parameter: the
    // module holds the object itself, so every use outside a graph is the
    // embedder's). The get_attr carries its kiln view (one per object, so
    // weight tying stays one node): kiln's kernels read it under no_grad;
    // under grad mode the graph records gradients and the autograd backend
    // hands the object itself to the embedder's ops. Either way the entry
    // holds only in the grad mode it was traced in.
    output_graph::Node* n = out.register_attr(runtime::Value::tensor(view), module_path_link(out, *owner), name);
    const bool grad = runtime::grad_mode_enabled();
    out.guards().require_grad_mode(grad);
    if (grad) out.mark_requires_grad(n, "parameter " + n->target_str() + " requires grad");
    return make_tensor(n, source);
  }
  if (value.is(runtime::Kind::Module)) {
    if (source && traced_unspecialized(value.as<runtime::ModuleObj>())) {
      output_graph::Guard g;  // identity only: its structure is guarded as it is read
      g.source = source;
      g.kind = output_graph::GuardKind::IdMatch;
      g.expected = value;
      out.guards().add(std::move(g));
      VT t = make_unspecialized_nn_module(value, name, source);
      t->path_parent = owner;
      return t;
    }
    if (source) {
      output_graph::Guard g;
      g.source = source;
      g.kind = output_graph::GuardKind::ModuleVersion;
      g.expected = value;
      g.version = value.as<runtime::ModuleObj>()->version;
      out.guards().add(std::move(g));
    }
    return make_child_module(value, owner, name, source);
  }
  throw_error(ErrorKind::TypeError, "register_attr_or_module: '" + name + "' is neither a tensor nor a module");
}

}  // namespace kiln::variables
