// Graph structure, fusion groups and the memory plan (lifetimes, reuse, overlap checks).
#include <gtest/gtest.h>

#include "model/build_graph.h"
#include "model/model.h"
#include "runtime/session.h"

namespace lmf {
namespace {

const std::string kGolden = std::string(LMFUSE_SOURCE_DIR) + "/tests/data/golden/";

bool overlap(const GTensor& a, const GTensor& b) {
  return a.offset < b.offset + b.bytes() && b.offset < a.offset + a.bytes();
}

// Every pair of tensors whose lifetimes overlap must live in disjoint memory.
void expect_plan_sound(const Graph& g) {
  for (size_t i = 0; i < g.tensors.size(); ++i)
    for (size_t j = i + 1; j < g.tensors.size(); ++j) {
      const auto &a = g.tensors[i], &b = g.tensors[j];
      auto end = [](const GTensor& t) { return t.kind == TensorKind::Output ? 1 << 30 : std::max(t.last_read, t.first_write); };
      const bool live_together = a.first_write <= end(b) && b.first_write <= end(a);
      if (live_together) EXPECT_FALSE(overlap(a, b)) << a.name << " and " << b.name;
    }
  for (const auto& t : g.tensors) EXPECT_LE(t.offset + t.bytes(), g.total_bytes) << t.name;
}

TEST(Graph, NamesGroupsAndPlanForQwen3) {
  auto m = Model::load(kGolden + "qwen3-tiny-f32.gguf");
  for (int64_t T : {1, 5}) {
    Graph g = build_graph(*m, T, false);
    expect_plan_sound(g);
    // Named intermediates per layer.
    for (const char* n : {"blk.0.attn_norm", "blk.0.q_rope", "blk.1.ffn_act", "blk.1.l_out", "result_output"}) {
      bool found = false;
      for (const auto& t : g.tensors) found |= t.name == n;
      EXPECT_TRUE(found) << n;
    }
    // Per layer: QKV, gate/up, o-resid, down-resid; then the output projection with its norm.
    ASSERT_EQ(g.groups.size(), size_t(4 * m->hp.n_layer + 1));
    const FusionGroup& lg = g.groups.back();
    EXPECT_EQ(lg.kind, GroupKind::Logits);
    EXPECT_EQ(lg.layer, -1);
    ASSERT_EQ(lg.members.size(), 1u);
    EXPECT_EQ(g.ops[size_t(lg.leader())].out[0], g.logits);
    ASSERT_GE(lg.norm, 0);
    EXPECT_EQ(g.ops[size_t(lg.norm)].kind, OpKind::RmsNorm);
    EXPECT_GE(lg.add, 0) << "the last layer's residual add feeds the output norm";
    EXPECT_TRUE(lg.epilogue.empty());
    int qkv = 0;
    for (const auto& grp : g.groups) {
      if (grp.kind != GroupKind::QKV) continue;
      ++qkv;
      EXPECT_EQ(grp.members.size(), 3u);
      EXPECT_GE(grp.norm, 0);
      EXPECT_EQ(grp.add >= 0, grp.layer > 0) << "layer 0 reads the embedding directly";
      // q/k head norms, two ropes and the KV store form the epilogue.
      EXPECT_EQ(grp.epilogue.size(), 5u);
    }
    EXPECT_EQ(qkv, m->hp.n_layer);
    EXPECT_EQ(g.t(g.logits).rows, 1);
  }
}

// Accept every group the way a GPU backend folds them (norm + add + epilogue in one launch).
void accept_all_folded(Graph& g) {
  g.reset_fusion();
  for (auto& grp : g.groups) {
    grp.accepted = true;
    grp.fold_norm = grp.norm >= 0;
    grp.fold_add = grp.add >= 0 && grp.kind != GroupKind::OResid && grp.kind != GroupKind::DownResid;
    grp.fold_epilogue = true;
    if (grp.kind == GroupKind::OResid || grp.kind == GroupKind::DownResid) {
      // The residual add of these is folded into the next norm group instead, except the last.
      bool taken = false;
      for (const auto& o : g.groups) taken |= o.add == grp.epilogue[0];
      if (taken) grp.accepted = grp.fold_epilogue = false;
    }
  }
}

TEST(Graph, FusedOutputOverlappingItsInputIsRehomed) {
  auto m = Model::load(kGolden + "qwen3-tiny-f32.gguf");
  Graph g = build_graph(*m, 1, false);
  accept_all_folded(g);
  // The unfused plan reuses memory across ops that the fused launches now run together: find
  // at least one accepted group whose written range overlaps a range it still reads.
  int overlapping = 0;
  for (const auto& grp : g.groups) {
    if (!grp.accepted) continue;
    std::vector<int> r, w;
    group_io(g, grp, r, w);
    for (int a : w)
      for (int b : r) overlapping += overlap(g.t(a), g.t(b));
  }
  ASSERT_GT(overlapping, 0) << "test premise: the plan must contain a fused overlap";
  OverlapReport rep = fix_overlaps(g);
  EXPECT_GT(rep.rehomed, 0);
  EXPECT_EQ(rep.rejected, 0);
  for (const auto& grp : g.groups) {
    if (!grp.accepted) continue;
    std::vector<int> r, w;
    group_io(g, grp, r, w);
    for (int a : w)
      for (int b : r) EXPECT_FALSE(a != b && overlap(g.t(a), g.t(b))) << g.t(a).name << " vs " << g.t(b).name;
  }
  expect_plan_sound(g);
  EXPECT_GT(g.total_bytes, g.arena_bytes);
}

TEST(Graph, FusionIsAbandonedWhenRehomingIsNotPossible) {
  auto m = Model::load(kGolden + "qwen3-tiny-f32.gguf");
  Graph g = build_graph(*m, 1, false);
  accept_all_folded(g);
  OverlapReport rep = fix_overlaps(g, /*max_extra_bytes=*/0);
  EXPECT_GT(rep.rejected, 0);
  EXPECT_EQ(rep.rehomed, 0);
  apply_groups(g);
  for (const auto& grp : g.groups) {
    if (grp.accepted) continue;
    // A rejected group launches every op of its own again (the plain unfused graph).
    for (int mi : grp.members) EXPECT_TRUE(g.ops[size_t(mi)].launch);
    if (!grp.reject_reason.empty()) EXPECT_NE(grp.reject_reason.find("overlap"), std::string::npos);
  }
  EXPECT_EQ(g.total_bytes, g.arena_bytes);
}

TEST(Graph, ResetClearsEveryDecision) {
  auto m = Model::load(kGolden + "llama-tiny-f32.gguf");
  Graph g = build_graph(*m, 3, true);
  const size_t arena = g.arena_bytes;
  accept_all_folded(g);
  fix_overlaps(g);
  apply_groups(g);
  g.reset_fusion();
  for (const auto& op : g.ops) {
    EXPECT_TRUE(op.launch);
    EXPECT_EQ(op.group, -1);
  }
  for (const auto& grp : g.groups) EXPECT_FALSE(grp.accepted);
  for (const auto& t : g.tensors) EXPECT_FALSE(t.rehomed);
  EXPECT_EQ(g.arena_bytes, arena);
  EXPECT_EQ(g.total_bytes, arena);
}

TEST(Graph, FollowersLaunchNothing) {
  auto m = Model::load(kGolden + "qwen2-tiny-f32.gguf");
  Graph g = build_graph(*m, 1, false);
  accept_all_folded(g);
  fix_overlaps(g);
  apply_groups(g);
  for (const auto& grp : g.groups) {
    if (!grp.accepted) continue;
    EXPECT_TRUE(g.ops[size_t(grp.leader())].launch);
    for (size_t i = 1; i < grp.members.size(); ++i) EXPECT_FALSE(g.ops[size_t(grp.members[i])].launch);
    if (grp.fold_norm) EXPECT_FALSE(g.ops[size_t(grp.norm)].launch);
    for (int e : grp.epilogue) EXPECT_FALSE(g.ops[size_t(e)].launch);
  }
}

}  // namespace
}  // namespace lmf
