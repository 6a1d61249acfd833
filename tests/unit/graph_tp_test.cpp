// A tensor-parallel rank's graph (model/tp_split.h): an in-place all-reduce right after o_proj
// and after down, before the residual add reads them; no residual-epilogue group formed across
// it; the other groups and a sound memory plan kept.
#include <gtest/gtest.h>

#include <algorithm>

#include "model/build_graph.h"
#include "model/model.h"
#include "model/tp_split.h"

namespace lmf {
namespace {

const std::string kGolden = std::string(LMFUSE_SOURCE_DIR) + "/tests/data/golden/";

int count_groups(const Graph& g, GroupKind k) {
  return int(std::count_if(g.groups.begin(), g.groups.end(), [&](const FusionGroup& x) { return x.kind == k; }));
}

TEST(GraphTp, AllReduceAfterOprojAndDownAndNoResidualGroupAcrossIt) {
  auto m = Model::load(kGolden + "llama-tiny-f32.gguf");
  auto r = tp_split(*m, 1, 2);
  const int L = int(m->hp.n_layer);
  for (int64_t T : {1, 6}) {
    const Graph whole = build_graph(*m, T, false), rank = build_graph(*r, T, false);
    // The whole model: no all-reduce, a residual group after every o_proj and down.
    EXPECT_EQ(std::count_if(whole.ops.begin(), whole.ops.end(), [](const Op& o) { return o.kind == OpKind::AllReduce; }), 0);
    EXPECT_EQ(count_groups(whole, GroupKind::OResid), L);
    EXPECT_EQ(count_groups(whole, GroupKind::DownResid), L);
    // The rank: two all-reduces per layer, each in place on the matmul's output, read next by
    // the residual add.
    int n_ar = 0;
    for (size_t i = 0; i < rank.ops.size(); ++i) {
      const Op& op = rank.ops[i];
      if (op.kind != OpKind::AllReduce) continue;
      ++n_ar;
      ASSERT_EQ(op.in.size(), 1u);
      ASSERT_EQ(op.out, op.in);
      const GTensor& x = rank.t(op.in[0]);
      EXPECT_EQ(x.rows, T);
      EXPECT_EQ(x.cols, m->hp.n_embd);
      const Op& prev = rank.ops[i - 1];
      EXPECT_EQ(prev.kind, OpKind::MatMul);
      EXPECT_EQ(prev.out[0], op.in[0]);
      EXPECT_TRUE(prev.w == &r->layers[size_t(op.layer)].wo || prev.w == &r->layers[size_t(op.layer)].w_down) << op.name;
      const auto readers = consumers_of(rank, op.in[0]);
      ASSERT_EQ(readers.size(), 2u) << op.name;  // the all-reduce, then the residual add
      EXPECT_EQ(readers[0], int(i));
      EXPECT_EQ(rank.ops[size_t(readers[1])].kind, OpKind::Add);
      EXPECT_GT(readers[1], int(i));
    }
    EXPECT_EQ(n_ar, 2 * L);
    EXPECT_EQ(count_groups(rank, GroupKind::OResid), 0);
    EXPECT_EQ(count_groups(rank, GroupKind::DownResid), 0);
    EXPECT_EQ(count_groups(rank, GroupKind::QKV), L);
    EXPECT_EQ(count_groups(rank, GroupKind::GateUp), L);
    EXPECT_EQ(count_groups(rank, GroupKind::Logits), 1);
    // The rank's shapes: its heads, its FFN rows, its vocabulary slice.
    for (const auto& t : rank.tensors) {
      if (t.name == "blk.0.attn") {
        EXPECT_EQ(t.cols, m->hp.q_dim() / 2);
      }
      if (t.name == "blk.0.ffn_act") {
        EXPECT_EQ(t.cols, m->hp.n_ff / 2);
      }
    }
    EXPECT_EQ(rank.t(rank.logits).cols, r->tp.vocab_end - r->tp.vocab_begin);
    // The in-place tensor lives from its matmul to its add: nothing else is placed over it.
    for (const Op& op : rank.ops) {
      if (op.kind != OpKind::AllReduce) continue;
      const GTensor& x = rank.t(op.in[0]);
      for (const auto& y : rank.tensors) {
        if (&y == &x || y.first_write < 0) continue;
        const bool live = y.first_write <= x.last_read && x.first_write <= std::max(y.last_read, y.first_write);
        if (live) {
          EXPECT_FALSE(y.offset < x.offset + x.bytes() && x.offset < y.offset + y.bytes()) << x.name << " / " << y.name;
        }
      }
    }
  }
}

// Vocab-parallel embedding: the lookup of the rank's slice, then one all-reduce more, in place.
TEST(GraphTp, VocabParallelEmbeddingAddsAnAllReduceAfterTheLookup) {
  auto m = Model::load(kGolden + "qwen3-tiny-f32.gguf");
  TpOptions vp;
  vp.vocab_parallel_embedding = true;
  auto r = tp_split(*m, 1, 2, vp);
  const Graph g = build_graph(*r, 3, false);
  ASSERT_GE(g.ops.size(), 2u);
  EXPECT_EQ(g.ops[0].kind, OpKind::Embed);
  EXPECT_TRUE(g.ops[0].embed_slice);
  EXPECT_EQ(g.ops[0].vocab_begin, r->tp.vocab_begin);
  EXPECT_EQ(g.ops[1].kind, OpKind::AllReduce);
  EXPECT_EQ(g.ops[1].in, g.ops[0].out);
  EXPECT_EQ(g.ops[1].out, g.ops[0].out);
  EXPECT_EQ(std::count_if(g.ops.begin(), g.ops.end(), [](const Op& o) { return o.kind == OpKind::AllReduce; }),
            2 * m->hp.n_layer + 1);
  // Replicated (the default): no slice, no extra all-reduce.
  const Graph h = build_graph(*tp_split(*m, 1, 2), 3, false);
  EXPECT_FALSE(h.ops[0].embed_slice);
  EXPECT_EQ(h.ops[1].kind, OpKind::RmsNorm);
}

}  // namespace
}  // namespace lmf
