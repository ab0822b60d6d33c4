// NameMap: an insertion-ordered map from interned names to Values, the
// storage of module dicts (_parameters, _modules, _buffers, attributes),
// class method tables and program globals. Keys are interned, so lookup
// compares pointers; small maps (the common case: a few entries) are scanned
// linearly, larger ones keep a hash index.
#pragma once

#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/value/value.h"

namespace kiln::runtime {

class NameMap {
 public:
  using Entry = std::pair<Ref<StrObj>, Value>;

  const Value* find(const StrObj* key) const {
    if (index_.empty()) {
      for (const auto& e : entries_)
        if (e.first.get() == key) return &e.second;
      return nullptr;
    }
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &entries_[it->second].second;
  }
  const Value* find(std::string_view key) const { return find(intern(key).get()); }
  bool contains(const StrObj* key) const { return find(key) != nullptr; }

  // Inserts at the end, or replaces in place (keeping the position).
  void set(const Ref<StrObj>& key, Value v) {
    if (const Value* p = find(key.get())) {
      *const_cast<Value*>(p) = std::move(v);
      return;
    }
    entries_.emplace_back(key, std::move(v));
    // Index only the new entry once indexed: rebuilding on every insert made
    // building a Sequential of n children O(n^2).
    if (!index_.empty()) index_.emplace(key.get(), entries_.size() - 1);
    else if (entries_.size() > kLinearMax) reindex();
  }
  void set(std::string_view key, Value v) { set(intern(key), std::move(v)); }

  bool erase(const StrObj* key) {
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (entries_[i].first.get() == key) {
        entries_.erase(entries_.begin() + ptrdiff_t(i));
        index_.clear();
        if (entries_.size() > kLinearMax) reindex();
        return true;
      }
    }
    return false;
  }

  size_t size() const { return entries_.size(); }
  // Every key and value (Object::traverse of the map's owner).
  void traverse(Visitor& v) const {
    for (const Entry& e : entries_) {
      visit(v, e.first);
      visit(v, e.second);
    }
  }
  // Empties the map and hands its entries over (Object::clear of the
  // owner: they die after the map is consistent again).
  std::vector<Entry> take() {
    std::vector<Entry> out;
    out.swap(entries_);
    index_.clear();
    return out;
  }
  bool empty() const { return entries_.empty(); }
  const std::vector<Entry>& entries() const { return entries_; }
  auto begin() const { return entries_.begin(); }
  auto end() const { return entries_.end(); }

 private:
  static constexpr size_t kLinearMax = 8;
  void reindex() {
    index_.clear();
    for (size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].first.get()] = i;
  }
  std::vector<Entry> entries_;
  std::unordered_map<const StrObj*, size_t> index_;
};

// A program's global namespace, shared by all its functions. Lookups that
// miss here fall back to builtins().
struct GlobalsObj final : Object {
  NameMap map;
  // Where a name missing from `map` resolves: a Python module's functions
  // see python_builtins() (Python's namespace, runtime/semantics/builtins.h); null is
  // KBC's builtins().
  const NameMap* builtins = nullptr;
  // Optional: told of every STORE_GLOBAL after `map` has the value. A
  // namespace that mirrors another's (a Python module dict) writes the
  // store through, so the module sees what the program assigned.
  void (*on_store)(GlobalsObj* self, const StrObj* name, const Value& value) = nullptr;
  void* owner = nullptr;  // the on_store's own state
  void traverse(Visitor& v) const override { map.traverse(v); }
  void clear() override { map.take(); }
};

}  // namespace kiln::runtime
