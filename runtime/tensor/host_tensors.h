// What the embedder's tensors mean where kiln's own differ, for the
// tracer's Python frames. A hook the embedder sets (python/: torch), so the
// core never includes it.
#pragma once

namespace kiln::runtime {

// Whether the tensors of the call being traced are the embedder's, whose
// `x op= y` writes into x's memory (torch's __iadd__ & co.). kiln's own
// tensors have no in-place operators: `x += y` is `x = x + y`, a new
// tensor bound to the name, which a view of x or another name for x does
// not see. False without such an embedder.
using HostInPlaceHook = bool (*)();
void set_host_tensors_in_place(HostInPlaceHook hook);
bool host_tensors_in_place();

}  // namespace kiln::runtime
