// Passes over a scheduled kernel or program that need nothing of the
// graph: dimension simplification and memory planning.
#include <algorithm>
#include <climits>

#include "codegen/kernel_ir.h"

namespace kiln::codegen {

// Drops size-1 dims and merges dims that every access walks as one, so most
// pointwise kernels become one flat loop and row reductions one row loop.
void simplify(Kernel& k) {
  Dims sizes = k.outer;
  sizes.insert(sizes.end(), k.inner.begin(), k.inner.end());
  size_t no = k.outer.size();
  std::vector<Access*> acc;
  for (Access& a : k.accesses) acc.push_back(&a);
  acc.push_back(&k.store);
  auto erase_dim = [&](size_t d) {
    sizes.erase(sizes.begin() + long(d));
    for (Access* a : acc)
      if (a->strides.size() > d) a->strides.erase(a->strides.begin() + long(d));
    if (d < no) --no;
  };
  for (size_t d = sizes.size(); d-- > 0;) {
    const bool outer = d < no;
    const size_t group = outer ? no : sizes.size() - no;
    if (sizes[d].is(1) && group > 1) erase_dim(d);
  }
  for (size_t d = sizes.size(); d-- > 1;) {
    if ((d - 1 < no) != (d < no)) continue;  // never across the outer/inner boundary
    bool ok = true;
    for (Access* a : acc) {
      if (a->strides.size() <= d) continue;
      ok = ok && a->strides[d - 1] == a->strides[d] * sizes[d];
    }
    if (!ok) continue;
    sizes[d - 1] = sizes[d - 1] * sizes[d];
    for (Access* a : acc)
      if (a->strides.size() > d) a->strides[d - 1] = a->strides[d];
    erase_dim(d);
  }
  k.outer.assign(sizes.begin(), sizes.begin() + long(no));
  k.inner.assign(sizes.begin() + long(no), sizes.end());
}

void rebase_offsets(Kernel& k) {
  k.base_offsets.assign(k.buffers.size(), 0);
  std::vector<Access*> acc;
  for (Access& a : k.accesses) acc.push_back(&a);
  acc.push_back(&k.store);
  for (size_t l = 0; l < k.buffers.size(); ++l) {
    int64_t base = INT64_MAX;
    bool constant = true;
    for (const Access* a : acc)
      if (a->buffer == k.buffers[l]) {
        constant = constant && a->offset.is_static();
        if (constant) base = std::min(base, a->offset.coef);
      }
    if (!constant || base == INT64_MAX || base <= 0) continue;
    for (Access* a : acc)
      if (a->buffer == k.buffers[l]) a->offset = Dim::c(a->offset.coef - base);
    k.base_offsets[l] = base;
  }
}

// Temporaries share one arena: a buffer's bytes are reused once its last
// reader ran. Static programs only (sizes known); dynamic programs allocate
// each temporary per call.
void plan_memory(Program& prog) {
  const size_t nb = prog.buffers.size();
  std::vector<int> first(nb, INT32_MAX), last(nb, -1);
  auto use = [&](int buf, int step) {
    if (buf < 0) return;
    first[size_t(buf)] = std::min(first[size_t(buf)], step);
    last[size_t(buf)] = std::max(last[size_t(buf)], step);
  };
  for (size_t s = 0; s < prog.steps.size(); ++s) {
    const Step& st = prog.steps[s];
    const int i = int(s);
    if (st.kind == Step::Kind::Kernel) {
      const Kernel& k = prog.kernels[size_t(st.index)];
      for (const Access& a : k.accesses) use(a.buffer, i);
      use(k.store.buffer, i);
    } else if (st.kind == Step::Kind::Gemm) {
      const Gemm& g = prog.gemms[size_t(st.index)];
      use(g.a, i);
      use(g.b, i);
      use(g.out, i);
    } else {
      for (const Access& a : prog.eager[size_t(st.index)].tensor_args) use(a.buffer, i);
    }
  }
  if (prog.dynamic()) return;
  struct Block {
    int64_t off, size;
    int free_after;  // step of the last use
  };
  std::vector<Block> live;
  int64_t top = 0;
  int slot = 0;
  for (size_t b = 0; b < nb; ++b) {
    Buffer& buf = prog.buffers[b];
    if (buf.kind != Buffer::Kind::Temp || last[b] < 0) continue;
    const int64_t bytes = (product(buf.sizes).coef * int64_t(runtime::itemsize(buf.dtype)) + 63) / 64 * 64;
    // First fit among blocks whose owner is dead before this one is born.
    // Buffers are numbered in creation order, which is step order.
    int64_t off = -1;
    for (Block& blk : live) {
      if (blk.free_after < first[b] && blk.size >= bytes) {
        off = blk.off;
        blk.free_after = last[b];
        break;
      }
    }
    if (off < 0) {
      off = top;
      top += std::max<int64_t>(bytes, 64);
      live.push_back({off, std::max<int64_t>(bytes, 64), last[b]});
    }
    buf.arena_offset = off;
    buf.slot = slot++;
  }
  prog.arena_bytes = top;
}

}  // namespace kiln::codegen
