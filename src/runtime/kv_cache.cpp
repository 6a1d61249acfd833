#include "runtime/kv_cache.h"

#include <algorithm>

#include "util/status.h"

namespace lmf {

KvCache::KvCache(int64_t n_blocks, int64_t block_size, CopyBlock copy)
    : block_size_(block_size), copy_(std::move(copy)) {
  LMF_CHECK(n_blocks > 0 && n_blocks < (int64_t(1) << 31) && block_size > 0);
  ref_.assign(size_t(n_blocks), 0);
  held_.assign(size_t(n_blocks), 0);
  free_.reserve(size_t(n_blocks));
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));  // block 0 handed out first
}

const KvCache::Seq& KvCache::at(int32_t seq) const {
  auto it = seqs_.find(seq);
  LMF_CHECK(it != seqs_.end(), "no sequence ", seq, " in the KV cache");
  return it->second;
}

int32_t KvCache::take() {
  LMF_CHECK(!free_.empty());
  const int32_t b = free_.back();
  free_.pop_back();
  ref_[size_t(b)] = 1;
  return b;
}

void KvCache::retain(int32_t block) {
  LMF_CHECK(block >= 0 && block < n_blocks() && ref_[size_t(block)] > 0, "retain of a free block ", block);
  ++ref_[size_t(block)];
  ++held_[size_t(block)];
}

void KvCache::release(int32_t block) {
  LMF_CHECK(block >= 0 && block < n_blocks() && held_[size_t(block)] > 0, "release of an unretained block ", block);
  --held_[size_t(block)];
  if (--ref_[size_t(block)] == 0) free_.push_back(block);
}

int32_t KvCache::create() {
  const int32_t id = next_id_++;
  seqs_[id];
  return id;
}

int32_t KvCache::create_shared(std::span<const int32_t> blocks, int64_t len) {
  LMF_CHECK(len >= 0 && blocks_for(len) <= int64_t(blocks.size()));
  Seq s;
  s.blocks.assign(blocks.begin(), blocks.begin() + blocks_for(len));
  s.len = len;
  for (int32_t b : s.blocks) {
    LMF_CHECK(b >= 0 && b < n_blocks() && ref_[size_t(b)] > 0, "sharing a free block ", b);
    ++ref_[size_t(b)];
  }
  const int32_t id = next_id_++;
  seqs_[id] = std::move(s);
  return id;
}

int32_t KvCache::fork(int32_t seq) {
  const Seq& s = at(seq);
  return create_shared(s.blocks, s.len);
}

void KvCache::free(int32_t seq) {
  truncate(seq, 0);
  seqs_.erase(seq);
}

void KvCache::truncate(int32_t seq, int64_t len) {
  Seq& s = at(seq);
  LMF_CHECK(len >= 0 && len <= s.len, "truncate to ", len, " of a sequence of ", s.len);
  const size_t keep = size_t(blocks_for(len));
  for (size_t i = keep; i < s.blocks.size(); ++i) {
    const int32_t b = s.blocks[i];
    if (--ref_[size_t(b)] == 0) free_.push_back(b);
  }
  s.blocks.resize(keep);
  s.len = len;
}

int64_t KvCache::blocks_needed(int32_t seq, int64_t n) const {
  const Seq& s = at(seq);
  if (n <= 0) return 0;
  int64_t need = std::max<int64_t>(0, blocks_for(s.len + n) - int64_t(s.blocks.size()));
  // The block that position len falls in, when it is in the table already and shared.
  const int64_t first = s.len / block_size_;
  if (first < int64_t(s.blocks.size()) && ref_[size_t(s.blocks[size_t(first)])] > 1) ++need;
  return need;
}

bool KvCache::reserve(int32_t seq, int64_t n) {
  LMF_CHECK(n >= 0);
  if (n == 0) return true;
  if (blocks_needed(seq, n) > free_blocks()) return false;
  Seq& s = at(seq);
  const size_t first = size_t(s.len / block_size_);
  if (first < s.blocks.size() && ref_[size_t(s.blocks[first])] > 1) {
    // Copy-on-write: the positions before len in this block are another sequence's too.
    const int32_t old = s.blocks[first], mine = take();
    copy_(old, mine);
    --ref_[size_t(old)];
    s.blocks[first] = mine;
  }
  while (int64_t(s.blocks.size()) < blocks_for(s.len + n)) s.blocks.push_back(take());
  return true;
}

void KvCache::commit(int32_t seq, int64_t n) {
  Seq& s = at(seq);
  LMF_CHECK(n >= 0 && blocks_for(s.len + n) <= int64_t(s.blocks.size()), "commit past the reserved blocks");
  s.len += n;
}

void KvCache::check() const {
  std::vector<int32_t> refs(held_);
  for (const auto& [id, s] : seqs_) {
    LMF_CHECK(int64_t(s.blocks.size()) == blocks_for(s.len) || int64_t(s.blocks.size()) > blocks_for(s.len),
              "sequence ", id, " has fewer blocks than its length needs");
    for (int32_t b : s.blocks) ++refs[size_t(b)];
  }
  std::vector<char> is_free(ref_.size(), 0);
  for (int32_t b : free_) {
    LMF_CHECK(!is_free[size_t(b)], "block ", b, " twice in the free list");
    is_free[size_t(b)] = 1;
  }
  for (size_t b = 0; b < ref_.size(); ++b) {
    LMF_CHECK(refs[b] == ref_[b], "block ", b, ": ", ref_[b], " counted references, ", refs[b], " held");
    LMF_CHECK((ref_[b] == 0) == bool(is_free[b]), "block ", b, " free-list state does not match its count");
  }
}

}  // namespace lmf
