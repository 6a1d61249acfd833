// runtime/kv_cache.h: the paged KV cache's bookkeeping. Unit cases (alloc, free, fork with
// copy-on-write, truncate, exhaustion) and a fuzz-style run of random create / extend / fork /
// truncate / free / prefix-share interleavings against a reference model: every sequence is a
// list of values, the pool a grid of slots written through the block tables, and after every
// operation each sequence must read back its own values and the cache's invariants must hold.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "runtime/kv_cache.h"
#include "util/status.h"

namespace {

using lmf::KvCache;

// A pool of slots (block, position in block) holding ints, copied by the cache's CoW hook.
struct Pool {
  int64_t bs;
  std::vector<std::vector<int>> slots;
  int copies = 0;
  Pool(int64_t n, int64_t bs_) : bs(bs_), slots(size_t(n), std::vector<int>(size_t(bs_), -1)) {}
  KvCache::CopyBlock copier() {
    return [this](int32_t src, int32_t dst) {
      slots[size_t(dst)] = slots[size_t(src)];
      ++copies;
    };
  }
  int& at(const KvCache& c, int32_t seq, int64_t p) { return slots[size_t(c.blocks(seq)[size_t(p / bs)])][size_t(p % bs)]; }
};

// Appends values to seq as a step would: reserve, write the new positions, commit.
bool append(KvCache& c, Pool& pool, int32_t seq, const std::vector<int>& vals) {
  const int64_t len = c.length(seq);
  if (!c.reserve(seq, int64_t(vals.size()))) return false;
  for (size_t i = 0; i < vals.size(); ++i) pool.at(c, seq, len + int64_t(i)) = vals[i];
  c.commit(seq, int64_t(vals.size()));
  return true;
}

std::vector<int> read(KvCache& c, Pool& pool, int32_t seq) {
  std::vector<int> v;
  for (int64_t p = 0; p < c.length(seq); ++p) v.push_back(pool.at(c, seq, p));
  return v;
}

TEST(KvCache, AllocAppendFree) {
  Pool pool(4, 4);
  KvCache c(4, 4, pool.copier());
  const int32_t a = c.create();
  EXPECT_EQ(c.length(a), 0);
  ASSERT_TRUE(append(c, pool, a, {1, 2, 3, 4, 5}));
  EXPECT_EQ(c.length(a), 5);
  EXPECT_EQ(c.blocks(a).size(), 2u);
  EXPECT_EQ(c.free_blocks(), 2);
  EXPECT_EQ(read(c, pool, a), (std::vector<int>{1, 2, 3, 4, 5}));
  c.free(a);
  EXPECT_EQ(c.free_blocks(), 4);
  EXPECT_FALSE(c.exists(a));
  EXPECT_THROW(c.length(a), lmf::Error);
  c.check();
}

TEST(KvCache, ExhaustionIsARefusalThatChangesNothing) {
  Pool pool(3, 4);
  KvCache c(3, 4, pool.copier());
  const int32_t a = c.create(), b = c.create();
  ASSERT_TRUE(append(c, pool, a, std::vector<int>(8, 7)));
  EXPECT_EQ(c.blocks_needed(b, 5), 2);
  EXPECT_FALSE(c.reserve(b, 5));  // needs 2 blocks, 1 free
  EXPECT_EQ(c.length(b), 0);
  EXPECT_EQ(c.free_blocks(), 1);
  ASSERT_TRUE(append(c, pool, b, {9, 9, 9, 9}));  // 1 block fits
  EXPECT_EQ(read(c, pool, a), std::vector<int>(8, 7));
  c.check();
}

TEST(KvCache, ForkSharesBlocksAndCopiesOnWrite) {
  Pool pool(8, 4);
  KvCache c(8, 4, pool.copier());
  const int32_t a = c.create();
  ASSERT_TRUE(append(c, pool, a, {1, 2, 3, 4, 5, 6}));
  const int32_t b = c.fork(a);
  EXPECT_EQ(c.used_blocks(), 2);  // shared, nothing copied
  EXPECT_EQ(pool.copies, 0);
  EXPECT_EQ(c.refcount(c.blocks(a)[0]), 2);
  ASSERT_TRUE(append(c, pool, b, {70, 80}));  // writes into the shared partial block: copied first
  EXPECT_EQ(pool.copies, 1);
  EXPECT_EQ(c.blocks(a)[0], c.blocks(b)[0]);  // the full block stays shared
  EXPECT_NE(c.blocks(a)[1], c.blocks(b)[1]);
  ASSERT_TRUE(append(c, pool, a, {7}));  // a's partial block is its own now: no copy
  EXPECT_EQ(pool.copies, 1);
  EXPECT_EQ(read(c, pool, a), (std::vector<int>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(read(c, pool, b), (std::vector<int>{1, 2, 3, 4, 5, 6, 70, 80}));
  c.free(a);
  EXPECT_EQ(read(c, pool, b), (std::vector<int>{1, 2, 3, 4, 5, 6, 70, 80}));
  c.check();
}

TEST(KvCache, ForkAtABlockBoundaryCopiesNothing) {
  Pool pool(4, 4);
  KvCache c(4, 4, pool.copier());
  const int32_t a = c.create();
  ASSERT_TRUE(append(c, pool, a, {1, 2, 3, 4}));
  const int32_t b = c.fork(a);
  EXPECT_EQ(c.blocks_needed(b, 1), 1);
  ASSERT_TRUE(append(c, pool, b, {5}));
  EXPECT_EQ(pool.copies, 0);
  c.check();
}

TEST(KvCache, TruncateForRejectedTokensThenRewrite) {
  Pool pool(4, 4);
  KvCache c(4, 4, pool.copier());
  const int32_t a = c.create();
  ASSERT_TRUE(append(c, pool, a, {1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(c.used_blocks(), 3);
  c.truncate(a, 5);  // speculative tokens 6..9 rejected
  EXPECT_EQ(c.used_blocks(), 2);
  ASSERT_TRUE(append(c, pool, a, {60, 70}));
  EXPECT_EQ(read(c, pool, a), (std::vector<int>{1, 2, 3, 4, 5, 60, 70}));
  EXPECT_THROW(c.truncate(a, 8), lmf::Error);
  c.truncate(a, 0);
  EXPECT_EQ(c.used_blocks(), 0);
  c.check();
}

TEST(KvCache, TruncateOfAForkedSequenceLeavesTheOtherIntact) {
  Pool pool(8, 4);
  KvCache c(8, 4, pool.copier());
  const int32_t a = c.create();
  ASSERT_TRUE(append(c, pool, a, {1, 2, 3, 4, 5, 6}));
  const int32_t b = c.fork(a);
  c.truncate(b, 2);
  ASSERT_TRUE(append(c, pool, b, {30, 40, 50}));  // b's first block was shared: copied, a untouched
  EXPECT_EQ(read(c, pool, a), (std::vector<int>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(read(c, pool, b), (std::vector<int>{1, 2, 30, 40, 50}));
  c.check();
}

TEST(KvCache, PrefixSharingAndRetainedBlocks) {
  Pool pool(8, 4);
  KvCache c(8, 4, pool.copier());
  const int32_t a = c.create();
  ASSERT_TRUE(append(c, pool, a, {1, 2, 3, 4, 5, 6, 7, 8, 9}));
  // A prefix index keeps a's two full blocks after a ends.
  std::vector<int32_t> prefix(c.blocks(a).begin(), c.blocks(a).begin() + 2);
  for (int32_t blk : prefix) c.retain(blk);
  c.free(a);
  EXPECT_EQ(c.used_blocks(), 2);
  const int32_t b = c.create_shared(prefix, 8);
  ASSERT_TRUE(append(c, pool, b, {90}));
  EXPECT_EQ(read(c, pool, b), (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 90}));
  const int32_t d = c.create_shared(prefix, 6);  // part of the prefix: its second block is shared and partial
  ASSERT_TRUE(append(c, pool, d, {-7}));
  EXPECT_EQ(read(c, pool, d), (std::vector<int>{1, 2, 3, 4, 5, 6, -7}));
  EXPECT_EQ(read(c, pool, b), (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 90}));
  for (int32_t blk : prefix) c.release(blk);
  c.free(b);
  c.free(d);
  EXPECT_EQ(c.used_blocks(), 0);
  EXPECT_THROW(c.release(prefix[0]), lmf::Error);
  c.check();
}

// Random interleavings against the reference model.
TEST(KvCache, FuzzAgainstAReferenceModel) {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    std::mt19937 rng(seed);
    const int64_t bs = int64_t(1) << (rng() % 4), n_blocks = 4 + rng() % 40;
    Pool pool(n_blocks, bs);
    KvCache c(n_blocks, bs, pool.copier());
    std::map<int32_t, std::vector<int>> ref;
    int next_val = 0;
    for (int step = 0; step < 600; ++step) {
      const int op = int(rng() % 10);
      std::vector<int32_t> ids;
      for (auto& [id, v] : ref) ids.push_back(id);
      const int32_t pick = ids.empty() ? -1 : ids[rng() % ids.size()];
      if (op == 0 || ids.empty()) {
        ref[c.create()];
      } else if (op <= 4) {  // extend by 1..2 blocks' worth
        std::vector<int> vals(1 + rng() % size_t(2 * bs));
        for (int& x : vals) x = next_val++;
        const int64_t need = c.blocks_needed(pick, int64_t(vals.size())), free_before = c.free_blocks();
        const bool ok = append(c, pool, pick, vals);
        ASSERT_EQ(ok, need <= free_before) << "seed " << seed;
        if (!ok) ASSERT_EQ(c.free_blocks(), free_before);
        if (ok) ref[pick].insert(ref[pick].end(), vals.begin(), vals.end());
      } else if (op == 5) {
        ref[c.fork(pick)] = ref[pick];
      } else if (op == 6) {
        const int64_t len = int64_t(rng() % (ref[pick].size() + 1));
        c.truncate(pick, len);
        ref[pick].resize(size_t(len));
      } else if (op == 7) {
        c.free(pick);
        ref.erase(pick);
      } else if (op == 8) {  // share a prefix of pick with a new sequence
        const int64_t len = int64_t(rng() % (ref[pick].size() + 1));
        const int32_t s = c.create_shared(c.blocks(pick), len);
        ref[s] = std::vector<int>(ref[pick].begin(), ref[pick].begin() + len);
      } else {  // a rejected reservation leaves the sequence as it was
        const int64_t huge = (n_blocks + 1) * bs;
        ASSERT_FALSE(c.reserve(pick, huge));
      }
      c.check();
      for (auto& [id, v] : ref) ASSERT_EQ(read(c, pool, id), v) << "seed " << seed << " step " << step << " seq " << id;
    }
    for (auto& [id, v] : ref) c.free(id);
    EXPECT_EQ(c.used_blocks(), 0);
  }
}

}  // namespace
