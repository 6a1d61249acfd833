// The paged KV cache's bookkeeping, owned by the runtime (DESIGN.md, "Many sequences, one
// engine"). The memory is the backend's (Backend::alloc_kv: per layer, K and V pools of n_blocks
// blocks of block_size positions); this class hands blocks to sequences and keeps one block table
// per sequence. A block id names the same slot in every layer's pool.
//
// Blocks are reference-counted: fork() and a prefix share (create_shared) give a new sequence the
// blocks of another, and a write into a shared block first copies it (copy-on-write, through the
// backend's copy_kv_block). Running out of blocks is a recoverable refusal for that sequence alone
// (reserve() returns false and changes nothing); other sequences never notice.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace lmf {

class KvCache {
 public:
  // copy(src, dst): the backend copies block src's rows of every layer into block dst.
  using CopyBlock = std::function<void(int32_t src, int32_t dst)>;
  KvCache(int64_t n_blocks, int64_t block_size, CopyBlock copy);

  int64_t block_size() const { return block_size_; }
  int64_t n_blocks() const { return int64_t(ref_.size()); }
  int64_t free_blocks() const { return int64_t(free_.size()); }
  int64_t used_blocks() const { return n_blocks() - free_blocks(); }
  // Positions a pool of this many blocks holds for one sequence.
  int64_t capacity() const { return n_blocks() * block_size_; }

  // A new, empty sequence; returns its id (never reused while the cache lives).
  int32_t create();
  // A new sequence holding the first `len` positions of `blocks` (another sequence's table or a
  // prefix index's): the blocks are shared, not copied. len <= blocks.size() * block_size.
  int32_t create_shared(std::span<const int32_t> blocks, int64_t len);
  // A new sequence equal to `seq` (same positions, shared blocks).
  int32_t fork(int32_t seq);
  void free(int32_t seq);
  bool exists(int32_t seq) const { return seqs_.count(seq) != 0; }
  // Forgets positions >= len (len <= length(seq)); blocks past it go back to the pool.
  void truncate(int32_t seq, int64_t len);

  // Makes positions [length, length + n) writable for `seq`: new blocks for positions past its
  // table, and a private copy of a shared block they fall in. Returns false, changing nothing,
  // when the pool has too few free blocks (blocks_needed says how many it needs).
  bool reserve(int32_t seq, int64_t n);
  int64_t blocks_needed(int32_t seq, int64_t n) const;
  // After a step wrote positions [length, length + n) (reserved): length += n.
  void commit(int32_t seq, int64_t n);

  int64_t length(int32_t seq) const { return at(seq).len; }
  // The block table: block i holds positions [i * block_size, (i + 1) * block_size).
  std::span<const int32_t> blocks(int32_t seq) const { return at(seq).blocks; }
  int32_t refcount(int32_t block) const { return ref_[size_t(block)]; }

  // References held outside any sequence (the prefix index keeps full blocks alive with these).
  void retain(int32_t block);
  void release(int32_t block);

  // Checks every invariant (reference counts equal the references held, free list exact);
  // throws on a violation. For tests.
  void check() const;

 private:
  struct Seq {
    std::vector<int32_t> blocks;
    int64_t len = 0;
  };
  const Seq& at(int32_t seq) const;
  Seq& at(int32_t seq) { return const_cast<Seq&>(static_cast<const KvCache*>(this)->at(seq)); }
  int32_t take();
  int64_t blocks_for(int64_t len) const { return (len + block_size_ - 1) / block_size_; }

  int64_t block_size_;
  CopyBlock copy_;
  std::vector<int32_t> ref_;   // [n_blocks] references: sequences' tables + retain()
  std::vector<int32_t> free_;  // blocks with no reference (a stack: the last freed is reused first)
  std::vector<int32_t> held_;  // [n_blocks] retain() references, for check()
  std::unordered_map<int32_t, Seq> seqs_;
  int32_t next_id_ = 0;
};

}  // namespace lmf
