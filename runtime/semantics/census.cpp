// The object census (census.h). Nothing here is compiled without
// KILN_OBJECT_CENSUS: a normal build's Object has no links and no serial.
#include "runtime/semantics/census.h"

#ifdef KILN_OBJECT_CENSUS

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <typeinfo>
#include <unordered_map>
#include <vector>

#include "runtime/base/object.h"
#include "runtime/semantics/class_model.h"
#include "runtime/value/code.h"
#include "runtime/value/value.h"

namespace kiln::runtime {

// The list of live objects, newest first. A mutex, not the single-thread
// rule of base/object.h: the census is for test trees, and a thread making an
// object (a compile worker) must not corrupt the list.
struct Census {
  static std::mutex& mu() {
    static std::mutex* m = new std::mutex;  // never destroyed: objects die during static destruction
    return *m;
  }
  static Object*& first() {
    static Object* f = nullptr;
    return f;
  }
  static uint64_t& serial() {
    static uint64_t s = 0;
    return s;
  }
  static size_t& count() {
    static size_t n = 0;
    return n;
  }
  static void link(Object* o) {
    std::lock_guard<std::mutex> lock(mu());
    o->census_serial_ = serial()++;
    o->census_prev_ = nullptr;
    o->census_next_ = first();
    if (first()) first()->census_prev_ = o;
    first() = o;
    ++count();
  }
  static void unlink(Object* o) {
    std::lock_guard<std::mutex> lock(mu());
    if (o->census_prev_) o->census_prev_->census_next_ = o->census_next_;
    else first() = o->census_next_;
    if (o->census_next_) o->census_next_->census_prev_ = o->census_prev_;
    --count();
  }
  static uint64_t serial_of(const Object* o) { return o->census_serial_; }
  static bool is_permanent(const Object* o) { return o->census_permanent_; }
  static void set_permanent(const Object* o) { const_cast<Object*>(o)->census_permanent_ = true; }
  static std::vector<Object*> snapshot() {
    std::lock_guard<std::mutex> lock(mu());
    std::vector<Object*> all;
    all.reserve(count());
    for (Object* o = first(); o; o = o->census_next_) all.push_back(o);
    return all;
  }
};

Object::Object() noexcept { Census::link(this); }
Object::~Object() { Census::unlink(this); }

namespace census {
namespace {

std::string type_of(const Object* o) {
  const char* mangled = typeid(*o).name();
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  std::string s = status == 0 && name ? name.get() : mangled;
  for (const char* prefix : {"kiln::runtime::", "kiln::interpreter::", "kiln::"})
    if (s.rfind(prefix, 0) == 0) return s.substr(std::string_view(prefix).size());
  return s;
}

// What names an object in a report (a function's, a class's, a string's
// text), when it has such a thing.
std::string label_of(const Object* o) {
  auto clip = [](std::string s) { return s.size() > 40 ? s.substr(0, 40) + "..." : s; };
  if (auto* s = dynamic_cast<const StrObj*>(o)) return "'" + clip(s->s) + "'" + (s->interned ? " (interned)" : "");
  if (auto* f = dynamic_cast<const FunctionObj*>(o)) return f->code ? f->code->qualname : "";
  if (auto* c = dynamic_cast<const Code*>(o)) return c->qualname;
  if (auto* b = dynamic_cast<const BuiltinObj*>(o)) return b->name;
  if (auto* c = dynamic_cast<const ClassObj*>(o)) return c->name;
  if (auto* m = dynamic_cast<const ModuleObj*>(o)) return m->cls ? m->cls->name + " instance" : "";
  if (auto* l = dynamic_cast<const ListObj*>(o)) return std::to_string(l->items.size()) + " items";
  if (auto* t = dynamic_cast<const TupleObj*>(o)) return std::to_string(t->items.size()) + " items";
  return "";
}

// A process-lifetime cache's share of an object's count: the intern
// table's reference to an interned string, a permanent() cache's to its
// entry. The only references the census exempts (census.h); anything else
// held from outside is a leak.
uint32_t permanent_refs(const Object* o) {
  if (Census::is_permanent(o)) return 1;
  auto* s = dynamic_cast<const StrObj*>(o);
  return s && s->interned ? 1 : 0;
}

// The objects made since `since` (all of them for 0), with their gc_refs:
// every live object's references are subtracted (an old object can hold a
// new one), but only the judged ones are indexed, so a check after a small
// run costs a virtual call per live object, not a hash entry.
struct Graph {
  std::vector<Object*> all;  // the judged objects
  std::unordered_map<const Object*, size_t> index;
  std::vector<int64_t> gc_refs;  // refcount - references from live objects - the cache's share
  std::vector<uint8_t> held_by_old;  // referenced by an object older than `since`

  explicit Graph(uint64_t since) {
    std::vector<Object*> everyone = Census::snapshot();
    for (Object* o : everyone)
      if (Census::serial_of(o) >= since) all.push_back(o);
    index.reserve(all.size());
    for (size_t i = 0; i < all.size(); ++i) index.emplace(all[i], i);
    gc_refs.resize(all.size());
    held_by_old.resize(all.size());
    for (size_t i = 0; i < all.size(); ++i) gc_refs[i] = int64_t(all[i]->refcount()) - permanent_refs(all[i]);
    struct Subtract final : Visitor {
      Graph& g;
      bool from_old = false;
      explicit Subtract(Graph& g) : g(g) {}
      void operator()(const Object* o) override {
        auto it = g.index.find(o);
        if (it == g.index.end()) return;
        --g.gc_refs[it->second];
        if (from_old) g.held_by_old[it->second] = 1;
      }
    } subtract(*this);
    for (Object* o : everyone) {
      subtract.from_old = Census::serial_of(o) < since;
      o->traverse(subtract);
    }
  }

  // Marks (with `tag`, where still 0) everything reachable from the
  // objects `from` says.
  template <class From>
  void reach(std::vector<uint8_t>& mark, uint8_t tag, From&& from) const {
    std::vector<size_t> work;
    for (size_t i = 0; i < all.size(); ++i)
      if (!mark[i] && from(i)) {
        mark[i] = tag;
        work.push_back(i);
      }
    struct Push final : Visitor {
      const Graph& g;
      std::vector<uint8_t>& mark;
      std::vector<size_t>& work;
      uint8_t tag;
      Push(const Graph& g, std::vector<uint8_t>& m, std::vector<size_t>& w, uint8_t t) : g(g), mark(m), work(w), tag(t) {}
      void operator()(const Object* o) override {
        auto it = g.index.find(o);
        if (it == g.index.end() || mark[it->second]) return;
        mark[it->second] = tag;
        work.push_back(it->second);
      }
    } push(*this, mark, work, tag);
    while (!work.empty()) {
      size_t i = work.back();
      work.pop_back();
      all[i]->traverse(push);
    }
  }
};

enum : uint8_t { kUnreached = 0, kHeld = 1, kViaLeak = 2 };

}  // namespace

}  // namespace census

const Object* census::permanent(const Object* o) {
  Census::set_permanent(o);
  return o;
}

namespace census {

uint64_t mark() {
  std::lock_guard<std::mutex> lock(Census::mu());
  return Census::serial();
}

size_t live() {
  std::lock_guard<std::mutex> lock(Census::mu());
  return Census::count();
}

Report check(uint64_t since) {
  Graph g(since);
  Report r;
  auto leaked = [&](size_t i) { return g.gc_refs[i] > 0; };
  std::vector<uint8_t> mark(g.all.size(), kUnreached);
  // Held legitimately: by an older object (which the check does not judge:
  // a lazily built table, or the caller's own), or by the intern table.
  g.reach(mark, kHeld, [&](size_t i) {
    return g.held_by_old[i] || (permanent_refs(g.all[i]) > 0 && g.gc_refs[i] == 0);
  });
  g.reach(mark, kViaLeak, [&](size_t i) { return leaked(i); });
  size_t described = 0;
  for (size_t i = 0; i < g.all.size(); ++i) {
    const Object* o = g.all[i];
    if (g.gc_refs[i] < 0) {
      ++r.overcounted;
      ++r.overcounted_types[type_of(o)];
    }
    ++r.checked;
    if (leaked(i)) {
      ++r.leaked;
      ++r.leaked_types[type_of(o)];
      if (described++ < 8) {
        std::string label = label_of(o);
        r.samples += "  " + type_of(o) + (label.empty() ? "" : " " + label) + ": refcount " +
                     std::to_string(o->refcount()) + ", " + std::to_string(g.gc_refs[i]) + " from outside\n";
      }
    } else if (mark[i] == kHeld) {
      ++r.held_by_old;
    } else if (mark[i] == kViaLeak) {
      ++r.held_by_leaks;
    } else {
      ++r.in_cycles;
    }
  }
  return r;
}

size_t collect() {
  std::vector<Ref<Object>> garbage;
  {
    Graph g(0);
    std::vector<uint8_t> mark(g.all.size(), kUnreached);
    g.reach(mark, kHeld, [&](size_t i) { return g.gc_refs[i] > 0 || permanent_refs(g.all[i]) > 0; });
    for (size_t i = 0; i < g.all.size(); ++i)
      if (!mark[i] && g.all[i]->refcount() > 0) garbage.emplace_back(g.all[i]);
  }
  const size_t before = live();
  // Held here, each member stays alive while the others drop their
  // references to it; letting go then frees the cycle.
  for (const Ref<Object>& o : garbage) o->clear();
  garbage.clear();
  return before - live();
}

std::string Report::text() const {
  std::string s = std::to_string(checked) + " objects made since the mark are alive: " + std::to_string(leaked) +
                  " leaked (held from outside the object graph), " + std::to_string(held_by_leaks) +
                  " alive only through those, " + std::to_string(held_by_old) + " held by older objects, " +
                  std::to_string(in_cycles) + " in garbage cycles";
  if (leaked) {
    s += "\nleaked by type:";
    for (const auto& [type, n] : leaked_types) s += " " + type + " x" + std::to_string(n) + ";";
    s += "\n" + samples;
  }
  if (overcounted) {
    s += "\n" + std::to_string(overcounted) + " objects with more references reported than counted (a traverse reports what it does not own):";
    for (const auto& [type, n] : overcounted_types) s += " " + type + " x" + std::to_string(n) + ";";
  }
  return s;
}

}  // namespace census
}  // namespace kiln::runtime

#endif  // KILN_OBJECT_CENSUS
