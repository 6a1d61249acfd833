// Builds the decoder graph of one forward pass over T tokens from shared helpers (norm, qkv,
// attention, ffn), with every intermediate named as llama.cpp names it per layer.
#pragma once
#include "graph/graph.h"
#include "model/model.h"

namespace lmf {

// all_logits: logits for every position ([T, vocab]); otherwise for the last token only.
// n_gather > 0 (a batch step of a paged-KV backend): logits for the n_gather rows that
// StepInput::out_rows names ([n_gather, vocab]); all_logits is then false.
Graph build_graph(const Model& m, int64_t n_tokens, bool all_logits, int64_t n_gather = 0);

}  // namespace lmf
