// The server's prefix cache: KV blocks of finished requests, indexed by the tokens they hold, so
// a new request that starts with the same tokens (a system prompt, the earlier turns of a chat)
// shares those blocks instead of computing them again. Whole blocks only: block i of a cached
// sequence is keyed by its tokens and its parent block's key (a chain, as vLLM's automatic prefix
// caching keys blocks), and an entry stores its tokens so a hash collision never shares wrong
// KV. Entries hold a KvCache::retain() reference; evict_lru() releases the least recently used
// leaf when the scheduler needs blocks.
#pragma once
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/kv_cache.h"

namespace lmf::server {

class PrefixCache {
 public:
  explicit PrefixCache(KvCache& kv) : kv_(kv) {}
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  struct Match {
    std::vector<int32_t> blocks;  // the cached blocks of the prefix, in order
    int64_t n_tokens = 0;         // blocks.size() * block_size
  };
  // The longest cached prefix of `tokens` in whole blocks, at most `limit` tokens (a request keeps
  // at least its last prompt token to evaluate). Marks the entries used.
  Match lookup(std::span<const int32_t> tokens, int64_t limit);
  // Adds the whole blocks of a sequence holding `tokens` (its block table `blocks`); blocks
  // already cached under the same key are kept, not duplicated.
  void insert(std::span<const int32_t> tokens, std::span<const int32_t> blocks);
  // Releases the least recently used entry that no other entry extends; false when empty.
  bool evict_lru();

  int64_t entries() const { return int64_t(map_.size()); }
  // Entries whose block no sequence shares (only this cache holds it): what evict_lru() can give
  // back when the scheduler needs blocks. O(entries).
  int64_t evictable() const;
  // Counters for /metrics: lookups, prompt tokens looked up, of which found cached.
  int64_t lookups = 0, lookup_tokens = 0, hit_tokens = 0;

 private:
  struct Entry {
    int32_t block = -1;
    uint64_t parent = 0;  // key of the previous block (0: the first block)
    std::vector<int32_t> tokens;
    int children = 0;
    uint64_t used = 0;    // last use, in ticks
  };
  uint64_t key(uint64_t parent, std::span<const int32_t> toks) const;
  KvCache& kv_;
  std::unordered_map<uint64_t, Entry> map_;
  uint64_t tick_ = 0;
};

}  // namespace lmf::server
