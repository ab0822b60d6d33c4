#include "variables/wrap.h"

#include "runtime/module.h"

namespace kiln::variables {

VT wrap_fx_proxy(output_graph::OutputGraph& out, runtime::OpId op, std::vector<output_graph::Arg> args,
                 std::vector<std::pair<std::string, output_graph::Arg>> kwargs) {
  return make_tensor(out.create_call(op, std::move(args), std::move(kwargs)));
}

VT register_attr_or_module(output_graph::OutputGraph& out, const runtime::Value& value, const std::string& path,
                           const SourceRef& source) {
  if (value.is_none()) return make_constant(runtime::Value::none());
  if (value.is(runtime::Kind::Tensor)) return make_tensor(out.register_attr(value, path), source);
  if (value.is(runtime::Kind::Module)) {
    if (source) {
      output_graph::Guard g;
      g.source = source;
      g.kind = output_graph::GuardKind::ModuleVersion;
      g.expected = value;
      g.version = value.as<runtime::ModuleObj>()->version;
      out.guards().add(std::move(g));
    }
    return make_nn_module(value, path, source);
  }
  throw_error(ErrorKind::TypeError, "register_attr_or_module: '" + path + "' is neither a tensor nor a module");
}

}  // namespace kiln::variables
