// Byte-level BPE model: GPT-2's byte <-> unicode mapping, the vocabulary in that spelling, and
// merges by rank. encode_piece() turns the raw bytes of one pre-tokenized piece into ids.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace lmf {

// GPT-2 maps every byte to a printable code point so tokens can be stored as text: bytes that
// are printable Latin-1 map to themselves, the others to U+0100 + n in byte order.
struct ByteLevel {
  static const std::string& to_unicode(uint8_t b);  // UTF-8 spelling of the mapped char
  // Raw bytes of a byte-level spelled token. Characters outside the mapping are copied as
  // their UTF-8 (HF's decoder does the same for added tokens). Returns false if any was.
  static bool to_bytes(std::string_view spelled, std::string& out);
  static std::string encode(std::string_view raw);  // raw bytes -> byte-level spelling
};

struct StrHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StrMap = std::unordered_map<std::string, int32_t, StrHash, std::equal_to<>>;

class BpeModel {
 public:
  BpeModel() = default;
  BpeModel(BpeModel&& o) noexcept { *this = std::move(o); }
  BpeModel& operator=(BpeModel&& o) noexcept;

  // vocab[id] is the byte-level spelling ("" for ids that are not BPE tokens, e.g. added).
  // merges in rank order, each "left" + "right". Throws lmf::Error (naming `what`) when a
  // merge refers to a token that is not in the vocabulary.
  void load(const std::vector<std::string>& vocab,
            const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
            const std::string& what);

  // Appends the ids of one piece (raw bytes). Thread-safe; results are cached by piece.
  void encode_piece(std::string_view raw, std::vector<int32_t>& out) const;
  int32_t find(std::string_view spelled) const;  // -1 if absent
  bool ignore_merges() const { return ignore_merges_; }
  size_t n_merges() const { return n_merges_; }

 private:
  void bpe(std::string_view raw, std::vector<int32_t>& out) const;
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

  StrMap tok_;                   // byte-level spelling -> id
  int32_t byte_id_[256];         // id of each single byte's token (-1 if absent)
  struct Merge { int32_t rank, id; };
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank, merged id
  size_t n_merges_ = 0;
  bool ignore_merges_ = false;
  // Piece -> ids cache: text repeats a small set of words, so most pieces skip BPE.
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StrHash, std::equal_to<>> cache_;
};

}  // namespace lmf
