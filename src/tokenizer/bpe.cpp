#include "tokenizer/bpe.h"

#include <array>
#include <limits>

#include "tokenizer/utf8.h"
#include "util/status.h"

namespace lmf {

namespace {
struct ByteTables {
  std::array<std::string, 256> to_uni;
  std::unordered_map<uint32_t, uint8_t> from_uni;
  ByteTables() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      uint32_t cp = printable ? uint32_t(b) : uint32_t(256 + n++);
      utf8::append(to_uni[b], cp);
      from_uni[cp] = uint8_t(b);
    }
  }
};
const ByteTables& tables() {
  static const ByteTables t;
  return t;
}
}  // namespace

const std::string& ByteLevel::to_unicode(uint8_t b) { return tables().to_uni[b]; }

bool ByteLevel::to_bytes(std::string_view s, std::string& out) {
  const auto& t = tables();
  bool all = true;
  size_t i = 0;
  while (i < s.size()) {
    size_t bad;
    bool tr;
    size_t len = utf8::seq_len(s, i, &bad, &tr);
    if (!len) {  // not UTF-8 at all: copy the byte
      out += s[i++];
      all = false;
      continue;
    }
    size_t l2;
    uint32_t cp = utf8::decode_at(s, i, &l2);
    auto it = t.from_uni.find(cp);
    if (it != t.from_uni.end()) {
      out += char(it->second);
    } else {
      out.append(s.substr(i, len));
      all = false;
    }
    i += len;
  }
  return all;
}

std::string ByteLevel::encode(std::string_view raw) {
  std::string s;
  s.reserve(raw.size() * 2);
  for (char c : raw) s += to_unicode(uint8_t(c));
  return s;
}

BpeModel& BpeModel::operator=(BpeModel&& o) noexcept {
  tok_ = std::move(o.tok_);
  std::copy(o.byte_id_, o.byte_id_ + 256, byte_id_);
  std::copy(o.fallback_id_, o.fallback_id_ + 256, fallback_id_);
  unk_id_ = o.unk_id_;
  merges_ = std::move(o.merges_);
  n_merges_ = o.n_merges_;
  opt_ = std::move(o.opt_);
  cache_.clear();
  return *this;
}

void BpeModel::load(const std::vector<std::pair<std::string, int32_t>>& vocab,
                    const std::vector<std::pair<std::string, std::string>>& merges,
                    const BpeOptions& opt, const std::string& what) {
  opt_ = opt;
  tok_.clear();
  tok_.reserve(vocab.size());
  for (const auto& [s, id] : vocab) tok_.insert_or_assign(s, id);
  static const char* const kHex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    byte_id_[b] = find(ByteLevel::to_unicode(uint8_t(b)));
    const char name[] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>', 0};
    fallback_id_[b] = find(name);
  }
  unk_id_ = opt.unk_token.empty() ? -1 : find(opt.unk_token);
  merges_.clear();
  merges_.reserve(merges.size());
  std::string joined;
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    joined = a + b;
    for (const std::string* part : {&a, &b, const_cast<const std::string*>(&joined)})
      if (find(*part) < 0)
        LMF_FAIL(what, ": merge #", r, " '", a, " ", b, "' uses '", *part,
                 "', which is not in the model's vocabulary");
    // A pair listed twice takes its last rank (HF collects the merges into a map in order).
    merges_.insert_or_assign(key(find(a), find(b)), Merge{int32_t(r), find(joined)});
  }
  n_merges_ = merges.size();
  std::lock_guard lk(mu_);
  cache_.clear();
}

int32_t BpeModel::find(std::string_view spelled) const {
  auto it = tok_.find(spelled);
  return it == tok_.end() ? -1 : it->second;
}

bool BpeModel::uses_unk_or_fallback() const {
  if (!opt_.byte_level) return true;
  for (int b = 0; b < 256; ++b)
    if (byte_id_[b] < 0 && (opt_.byte_fallback || !opt_.unk_token.empty())) return true;
  return false;
}

// The symbols BPE starts from, as HF's BPE::merge_word builds them: each character (byte-level:
// each byte's character) is its token; else, with byte_fallback, its bytes' "<0xXX>" tokens when
// all exist; else the unk token (consecutive ones fused with fuse_unk), or nothing without one.
// HF adds a pending unk only when the next known character comes, so bytes from byte fallback
// land before it; we keep that order.
void BpeModel::initial_symbols(std::string_view raw, std::vector<int32_t>& sym) const {
  bool unk_pending = false;
  auto unknown = [&] {
    if (opt_.unk_token.empty()) return;
    if (unk_id_ < 0) LMF_FAIL("tokenizer: the unk token '", opt_.unk_token, "' is not in the vocabulary");
    if (unk_pending && !opt_.fuse_unk) sym.push_back(unk_id_);
    unk_pending = true;
  };
  auto known = [&](int32_t id) {
    if (unk_pending) sym.push_back(unk_id_), unk_pending = false;
    sym.push_back(id);
  };
  auto fallback = [&](std::string_view bytes) {
    if (!opt_.byte_fallback) return false;
    for (char c : bytes)
      if (fallback_id_[uint8_t(c)] < 0) return false;
    for (char c : bytes) sym.push_back(fallback_id_[uint8_t(c)]);
    return true;
  };
  if (opt_.byte_level) {
    for (char c : raw) {
      int32_t id = byte_id_[uint8_t(c)];
      if (id >= 0) known(id);
      else if (!fallback(ByteLevel::to_unicode(uint8_t(c)))) unknown();
    }
  } else {
    for (size_t i = 0; i < raw.size();) {
      size_t len = 0;
      utf8::decode_at(raw, i, &len);  // text is valid UTF-8 here
      std::string_view ch = raw.substr(i, len);
      int32_t id = find(ch);
      if (id >= 0) known(id);
      else if (!fallback(ch)) unknown();
      i += len;
    }
  }
  if (unk_pending) sym.push_back(unk_id_);
}

void BpeModel::bpe(std::string_view raw, std::vector<int32_t>& out) const {
  if (opt_.ignore_merges) {  // Llama 3: a piece that is a whole token is taken as is
    int32_t id = opt_.byte_level ? find(ByteLevel::encode(raw)) : find(raw);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<int32_t> sym;
  sym.reserve(raw.size());
  initial_symbols(raw, sym);
  // Repeatedly merge the pair with the lowest rank (leftmost on ties), as HF's BPE does.
  // O(n^2) in the piece length; pieces are short and cached.
  std::vector<Merge> pair(sym.size());
  constexpr int32_t kNone = std::numeric_limits<int32_t>::max();
  auto rank_at = [&](size_t i) -> Merge {
    auto it = merges_.find(key(sym[i], sym[i + 1]));
    return it == merges_.end() ? Merge{kNone, -1} : it->second;
  };
  for (size_t i = 0; i + 1 < sym.size(); ++i) pair[i] = rank_at(i);
  while (sym.size() > 1) {
    size_t best = 0;
    int32_t best_rank = kNone;
    for (size_t i = 0; i + 1 < sym.size(); ++i)
      if (pair[i].rank < best_rank) best_rank = pair[i].rank, best = i;
    if (best_rank == kNone) break;
    sym[best] = pair[best].id;
    sym.erase(sym.begin() + best + 1);
    pair.erase(pair.begin() + best + 1);
    if (best + 1 < sym.size()) pair[best] = rank_at(best);
    else pair[best] = Merge{kNone, -1};
    if (best > 0) pair[best - 1] = rank_at(best - 1);
  }
  out.insert(out.end(), sym.begin(), sym.end());
}

void BpeModel::encode_piece(std::string_view raw, std::vector<int32_t>& out) const {
  constexpr size_t kMaxCachedLen = 64, kMaxCacheEntries = 1 << 17;
  if (raw.size() > kMaxCachedLen) {
    bpe(raw, out);
    return;
  }
  {
    std::lock_guard lk(mu_);
    auto it = cache_.find(raw);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  size_t n0 = out.size();
  bpe(raw, out);
  std::vector<int32_t> ids(out.begin() + ptrdiff_t(n0), out.end());
  std::lock_guard lk(mu_);
  if (cache_.size() >= kMaxCacheEntries) cache_.clear();
  cache_.emplace(std::string(raw), std::move(ids));
}

}  // namespace lmf
