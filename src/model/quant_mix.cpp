// The mixes of quant_mix.h.
#include "model/quant_mix.h"

#include <cctype>
#include <cstdlib>

namespace lmf {

namespace {

enum class M { Plain, Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, IQ4_NL, IQ4_XS };

struct MixDef {
  const char* name;
  M m;
  DType base;
  uint32_t file_type;  // LLAMA_FTYPE_MOSTLY_*
};

const MixDef kMixes[] = {
    {"q2_k", M::Q2_K, DType::Q2_K, 10},       {"q3_k_s", M::Q3_K_S, DType::Q3_K, 11},
    {"q3_k_m", M::Q3_K_M, DType::Q3_K, 12},   {"q3_k_l", M::Q3_K_L, DType::Q3_K, 13},
    {"q4_k_s", M::Q4_K_S, DType::Q4_K, 14},   {"q4_k_m", M::Q4_K_M, DType::Q4_K, 15},
    {"q5_k_s", M::Q5_K_S, DType::Q5_K, 16},   {"q5_k_m", M::Q5_K_M, DType::Q5_K, 17},
    {"q6_k", M::Q6_K, DType::Q6_K, 18},       {"iq4_nl", M::IQ4_NL, DType::IQ4_NL, 25},
    {"iq4_xs", M::IQ4_XS, DType::IQ4_XS, 30},
};

// Plain types and their general.file_type (the plain K types, every 2-D weight of one type, carry
// the nearest mix's id: llama.cpp has no file type of their own).
struct PlainDef {
  DType t;
  uint32_t file_type;
};
const PlainDef kPlain[] = {{DType::F32, 0},  {DType::F16, 1},  {DType::BF16, 32}, {DType::Q4_0, 2},
                           {DType::Q4_1, 3}, {DType::Q5_0, 8}, {DType::Q5_1, 9},  {DType::Q8_0, 7},
                           {DType::Q3_K, 11}, {DType::Q4_K, 14}, {DType::Q5_K, 16}};

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = char(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

const MixDef* find_mix(std::string_view name) {
  for (const MixDef& d : kMixes)
    if (name == d.name) return &d;
  return nullptr;
}

// llama-quantize's layer pick for the extra bits of the _M mixes.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// "blk.<i>.<rest>" -> i (or -1) and rest.
int layer_of(std::string_view name, std::string_view& rest) {
  rest = name;
  if (name.substr(0, 4) != "blk.") return -1;
  const size_t dot = name.find('.', 4);
  if (dot == std::string_view::npos) return -1;
  rest = name.substr(dot + 1);
  return std::atoi(std::string(name.substr(4, dot - 4)).c_str());
}

// The 32-block stand-in for a 256-block type whose block does not divide the row.
DType fallback(DType t) {
  switch (t) {
    case DType::Q2_K: case DType::Q3_K: return DType::Q4_0;
    case DType::IQ4_XS: return DType::IQ4_NL;
    case DType::Q4_K: return DType::Q5_0;
    case DType::Q5_K: return DType::Q5_1;
    case DType::Q6_K: return DType::Q8_0;
    default: return t;
  }
}

DType k_rule(const MixDef& d, const TensorRole& t) {
  std::string_view rest;
  const int i = layer_of(t.name, rest);
  const int n = t.n_layer;
  // The output matrix keeps 6 bits; with tied embeddings that is token_embd.weight.
  if (t.name == "output.weight" || (!t.has_output && t.name == "token_embd.weight")) return DType::Q6_K;
  if (t.name == "token_embd.weight") return d.base;
  if (rest == "attn_v.weight") {
    switch (d.m) {
      case M::Q2_K: return t.n_gqa >= 4 ? DType::Q4_K : DType::Q3_K;
      case M::Q3_K_M: return i < 2 ? DType::Q5_K : DType::Q4_K;
      case M::Q3_K_L: return DType::Q5_K;
      case M::Q4_K_S: return i < 4 ? DType::Q5_K : d.base;
      case M::Q4_K_M: case M::Q5_K_M: return use_more_bits(i, n) ? DType::Q6_K : d.base;
      case M::IQ4_NL: case M::IQ4_XS: return t.n_gqa >= 4 ? DType::Q5_K : d.base;
      default: return d.base;
    }
  }
  if (rest == "ffn_down.weight") {
    switch (d.m) {
      case M::Q2_K: return DType::Q3_K;
      case M::Q3_K_M: return i < n / 16 ? DType::Q5_K : DType::Q4_K;
      case M::Q3_K_L: return DType::Q5_K;
      case M::Q4_K_S: return i < n / 8 ? DType::Q5_K : d.base;
      case M::Q4_K_M: case M::Q5_K_M: return use_more_bits(i, n) ? DType::Q6_K : d.base;
      case M::IQ4_NL: case M::IQ4_XS: return i < n / 8 ? DType::Q5_K : d.base;  // without an imatrix
      default: return d.base;
    }
  }
  if (rest == "attn_output.weight") {
    switch (d.m) {
      case M::Q2_K: return DType::Q3_K;
      case M::Q3_K_M: return DType::Q4_K;
      case M::Q3_K_L: return DType::Q5_K;
      default: return d.base;
    }
  }
  return d.base;
}

}  // namespace

std::optional<QuantMix> parse_mix(std::string_view s) {
  const std::string low = lower(s);
  if (const MixDef* d = find_mix(low)) return QuantMix{d->name, d->base, d->file_type, true};
  if (auto t = parse_dtype(low))
    for (const PlainDef& p : kPlain)
      if (p.t == *t) return QuantMix{low, *t, p.file_type, false};
  return std::nullopt;
}

std::string mix_names() {
  std::string s;
  for (const MixDef& d : kMixes) s += std::string(s.empty() ? "" : ", ") + d.name;
  for (const PlainDef& p : kPlain) s += ", " + lower(dtype_name(p.t));
  return s;
}

DType mix_type(const QuantMix& mix, const TensorRole& t, bool* fell_back) {
  DType r = mix.base;
  if (mix.k_rules)
    if (const MixDef* d = find_mix(mix.name)) r = k_rule(*d, t);
  if (fell_back) *fell_back = t.cols % type_info(r).block != 0;
  if (t.cols % type_info(r).block != 0) r = fallback(r);
  if (t.cols % type_info(r).block != 0) r = DType::F16;
  return r;
}

}  // namespace lmf
