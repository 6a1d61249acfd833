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

// tokenizer.json "model" options that change how a piece becomes ids (HF BPE semantics).
struct BpeOptions {
  // Pieces are raw bytes spelled through ByteLevel before lookup (a ByteLevel pre-tokenizer);
  // otherwise a piece is looked up as its UTF-8 characters (SentencePiece-converted vocabularies).
  bool byte_level = true;
  bool byte_fallback = false;  // a character not in the vocabulary becomes its "<0xXX>" tokens
  bool ignore_merges = false;  // a piece that is a whole token is taken as is (Llama 3)
  bool fuse_unk = false;       // consecutive unknown characters become one unk token
  std::string unk_token;       // "" = none: unknown characters are dropped
};

class BpeModel {
 public:
  BpeModel() = default;
  BpeModel(BpeModel&& o) noexcept { *this = std::move(o); }
  BpeModel& operator=(BpeModel&& o) noexcept;

  // vocab: (spelling, id) pairs, the model's own vocabulary (tokenizer.json model.vocab; added
  // tokens only where they are in it). merges in rank order, each "left" + "right"; a pair
  // listed twice takes its last rank, as HF does. Throws lmf::Error (naming `what`) when a merge
  // refers to a token that is not in the vocabulary (HF refuses those files too).
  void load(const std::vector<std::pair<std::string, int32_t>>& vocab,
            const std::vector<std::pair<std::string, std::string>>& merges, const BpeOptions& opt,
            const std::string& what);

  // Appends the ids of one piece (raw bytes). Thread-safe; results are cached by piece.
  void encode_piece(std::string_view raw, std::vector<int32_t>& out) const;
  int32_t find(std::string_view spelled) const;  // -1 if absent
  bool ignore_merges() const { return opt_.ignore_merges; }
  const BpeOptions& options() const { return opt_; }
  size_t n_merges() const { return n_merges_; }
  // True when some byte (byte-level) can reach the unk token or byte fallback: then llama.cpp's
  // gpt2 GGUF model, which drops such bytes, would give other ids.
  bool uses_unk_or_fallback() const;

 private:
  void bpe(std::string_view raw, std::vector<int32_t>& out) const;
  void initial_symbols(std::string_view raw, std::vector<int32_t>& sym) const;
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

  StrMap tok_;                   // byte-level spelling -> id
  int32_t byte_id_[256];         // byte-level: id of each single byte's token (-1 if absent)
  int32_t fallback_id_[256];     // id of "<0xXX>" for each byte (-1 if absent)
  int32_t unk_id_ = -1;
  struct Merge { int32_t rank, id; };
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank, merged id
  size_t n_merges_ = 0;
  BpeOptions opt_;
  // Piece -> ids cache: text repeats a small set of words, so most pieces skip BPE.
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StrHash, std::equal_to<>> cache_;
};

}  // namespace lmf
