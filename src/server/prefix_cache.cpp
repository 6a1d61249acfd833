#include "server/prefix_cache.h"

#include <algorithm>

namespace lmf::server {

PrefixCache::~PrefixCache() {
  for (auto& [k, e] : map_) kv_.release(e.block);
}

uint64_t PrefixCache::key(uint64_t parent, std::span<const int32_t> toks) const {
  uint64_t h = parent ^ 0x9e3779b97f4a7c15ull;  // FNV-1a over the parent key and the tokens
  for (int32_t t : toks) {
    h ^= uint32_t(t);
    h *= 0x100000001b3ull;
    h ^= h >> 29;
  }
  return h == 0 ? 1 : h;  // 0 is "no parent"
}

PrefixCache::Match PrefixCache::lookup(std::span<const int32_t> tokens, int64_t limit) {
  ++lookups;
  lookup_tokens += int64_t(tokens.size());
  Match m;
  const int64_t bs = kv_.block_size();
  uint64_t parent = 0;
  ++tick_;
  for (int64_t i = 0; (i + 1) * bs <= std::min<int64_t>(limit, int64_t(tokens.size())); ++i) {
    const auto toks = tokens.subspan(size_t(i * bs), size_t(bs));
    const uint64_t k = key(parent, toks);
    auto it = map_.find(k);
    if (it == map_.end() || it->second.parent != parent || !std::equal(toks.begin(), toks.end(), it->second.tokens.begin()))
      break;
    it->second.used = tick_;
    m.blocks.push_back(it->second.block);
    parent = k;
  }
  m.n_tokens = int64_t(m.blocks.size()) * bs;
  hit_tokens += m.n_tokens;
  return m;
}

void PrefixCache::insert(std::span<const int32_t> tokens, std::span<const int32_t> blocks) {
  const int64_t bs = kv_.block_size();
  uint64_t parent = 0;
  ++tick_;
  for (int64_t i = 0; (i + 1) * bs <= int64_t(tokens.size()) && i < int64_t(blocks.size()); ++i) {
    const auto toks = tokens.subspan(size_t(i * bs), size_t(bs));
    const uint64_t k = key(parent, toks);
    auto it = map_.find(k);
    if (it != map_.end()) {
      if (it->second.parent != parent || !std::equal(toks.begin(), toks.end(), it->second.tokens.begin()))
        return;  // a colliding key: cache nothing past it
      it->second.used = tick_;
    } else {
      Entry e;
      e.block = blocks[size_t(i)];
      e.parent = parent;
      e.tokens.assign(toks.begin(), toks.end());
      e.used = tick_;
      kv_.retain(e.block);
      if (parent != 0) ++map_[parent].children;
      map_.emplace(k, std::move(e));
    }
    parent = k;
  }
}

int64_t PrefixCache::evictable() const {
  int64_t n = 0;
  for (const auto& [k, e] : map_) n += kv_.refcount(e.block) == 1;
  return n;
}

bool PrefixCache::evict_lru() {
  auto victim = map_.end();
  for (auto it = map_.begin(); it != map_.end(); ++it)
    if (it->second.children == 0 && (victim == map_.end() || it->second.used < victim->second.used)) victim = it;
  if (victim == map_.end()) return false;
  if (victim->second.parent != 0) {
    auto p = map_.find(victim->second.parent);
    if (p != map_.end()) --p->second.children;
  }
  kv_.release(victim->second.block);
  map_.erase(victim);
  return true;
}

}  // namespace lmf::server
