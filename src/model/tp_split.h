// Megatron-style tensor-parallel split of a loaded model into N ranks (issue 57). Rank r holds:
//   - Q / K / V (and their biases): the output rows of its heads [r*n_head/N, (r+1)*n_head/N) and
//     KV heads [r*n_head_kv/N, ...), so each rank's attention runs on its own heads against its
//     own KV cache; q_norm / k_norm are per head_dim and shared;
//   - gate / up: output rows [r*n_ff/N, (r+1)*n_ff/N);
//   - o_proj / down: the matching input columns, so each rank's product is a partial sum that an
//     AllReduce completes (build_graph inserts it when Model::tp.size > 1);
//   - the output projection: vocabulary rows [r*V/N, (r+1)*V/N) (vocab-parallel logits; the
//     caller gathers the slices); the vocabulary need not divide by N;
//   - the norms: replicated; the token embedding: replicated by default (a lookup reads T rows
//     of the table, so a vocab-parallel embedding saves only memory, (N-1)/N of the table, at
//     the price of one more all-reduce per step), vocab-parallel with TpOptions (where that
//     memory counts: 1.5 GiB per GPU of qwen3-32b's bf16 table).
// Row slices point into the parent's file mapping (no copy); column slices of o_proj / down are
// copied into the rank (each row's blocks [c0/block, c1/block)), so they must cut rows at block
// boundaries (32 or 256 elements by type).
#pragma once
#include <memory>
#include <string>

#include "model/model.h"

namespace lmf {

// Why m cannot be split n ways, in one line ("" when it can): heads, KV heads or FFN rows that
// do not divide by n, a column slice that would cut a quantized block, a vocabulary under n rows.
std::string tp_refusal(const Model& m, int n);

struct TpOptions {
  // The token embedding split as the logits are (each rank looks up the ids in its vocabulary
  // slice, zero rows for the others, then an all-reduce after the lookup): (N-1)/N of the table
  // saved per rank (and for a tied model the rank's embedding and output are one slice), one
  // all-reduce more per step. Off: the table is replicated.
  bool vocab_parallel_embedding = false;
};

// Rank `rank` of an n-way split (throws lmf::Error with tp_refusal's line when it cannot). The
// result points into m's weights: m must outlive it.
std::unique_ptr<Model> tp_split(const Model& m, int rank, int n, const TpOptions& o = {});

}  // namespace lmf
