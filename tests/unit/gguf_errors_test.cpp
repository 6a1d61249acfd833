// Bad GGUF files: each one must fail with an lmf::Error naming the file and the problem.
#include <gtest/gtest.h>

#include "gguf_test_util.h"

using namespace lmf;
using namespace lmf::gguf;
using gguf_test::open_error;
using gguf_test::Raw;

namespace {

// A valid file with one f32 tensor [8] (32 bytes) at offset 0.
Raw one_tensor(uint64_t offset = 0, std::vector<int64_t> ne = {8}, uint32_t type = 0) {
  Raw r;
  r.header(1, 1).kv_str("general.architecture", "test").tensor("x", ne, type, offset).pad();
  return r;
}

TEST(GgufErrors, ValidBaselineOpens) {
  Raw r = one_tensor();
  r.zeros(32);
  auto f = File::open_memory("mem.gguf", r.b.data(), r.b.size());
  ASSERT_EQ(f->tensors().size(), 1u);
  EXPECT_EQ(f->tensors()[0].nbytes, 32u);
}

TEST(GgufErrors, WrongMagic) {
  Raw r = one_tensor();
  r.zeros(32);
  r.b[0] = 'X';
  EXPECT_HAS(open_error(r.b), "expected magic 'GGUF', got 'XGUF'");
}

TEST(GgufErrors, UnsupportedVersion) {
  Raw r;
  r.header(0, 0, 1);
  EXPECT_HAS(open_error(r.b), "unsupported GGUF version 1 (expected 2 or 3)");
  Raw r4;
  r4.header(0, 0, 4);
  EXPECT_HAS(open_error(r4.b), "unsupported GGUF version 4 (expected 2 or 3)");
}

TEST(GgufErrors, Version2Accepted) {
  Raw r;
  r.header(0, 1, 2).kv_u32("a", 7);
  auto f = File::open_memory("v2.gguf", r.b.data(), r.b.size());
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->get_int("a"), 7);
}

TEST(GgufErrors, TruncatedHeaderAtEveryPoint) {
  Raw r = one_tensor();
  r.b.resize(r.b.size() - 1);  // drop the last padding byte: only the header counts here
  const size_t header = r.b.size();
  for (size_t cut = 0; cut < header; ++cut) {
    std::vector<uint8_t> b(r.b.begin(), r.b.begin() + cut);
    try {
      File::open_memory("cut.gguf", b.data(), b.size());
      ADD_FAILURE() << "cut at " << cut << " opened";
    } catch (const Error& e) {
      EXPECT_HAS(e.what(), "cut.gguf: ") << cut;
      EXPECT_HAS(e.what(), "truncated") << cut;
    }
  }
  // One cut through a real file, to see the path in the message.
  std::vector<uint8_t> b(r.b.begin(), r.b.begin() + 20);
  EXPECT_HAS(open_error(b), "truncated header: expected 8 bytes for");
}

TEST(GgufErrors, TruncatedData) {
  Raw r = one_tensor();
  r.zeros(31);  // the tensor needs 32
  EXPECT_HAS(open_error(r.b), "tensor 'x': data [0, 32) extends past end of file");
}

TEST(GgufErrors, TensorDataOutOfBounds) {
  Raw r = one_tensor(uint64_t(1) << 40);
  r.zeros(32);
  EXPECT_HAS(open_error(r.b), "tensor 'x': data offset 1099511627776 is out of bounds");
  // An offset near 2^64 must not wrap around in the range check.
  Raw w = one_tensor(~uint64_t(31));
  w.zeros(32);
  EXPECT_HAS(open_error(w.b), "out of bounds");
}

TEST(GgufErrors, OverlappingTensors) {
  Raw r;
  r.header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 32).pad().zeros(96);
  EXPECT_HAS(open_error(r.b), "tensors 'a' [0, 64) and 'b' [32, 64) overlap");
}

TEST(GgufErrors, MisalignedOffset) {
  Raw r = one_tensor(16);
  r.zeros(64);
  EXPECT_HAS(open_error(r.b), "tensor 'x': data offset 16 is not a multiple of the alignment 32");
}

TEST(GgufErrors, TooManyDims) {
  Raw r = one_tensor(0, {1, 1, 1, 1, 8});
  r.zeros(32);
  EXPECT_HAS(open_error(r.b), "tensor 'x': n_dims 5 exceeds the maximum of 4");
}

TEST(GgufErrors, NonPositiveDims) {
  Raw z = one_tensor(0, {8, 0});
  z.zeros(32);
  EXPECT_HAS(open_error(z.b), "tensor 'x': dimension 1 is 0, expected > 0");
  Raw n = one_tensor(0, {-8});
  n.zeros(32);
  EXPECT_HAS(open_error(n.b), "tensor 'x': dimension 0 is -8, expected > 0");
}

TEST(GgufErrors, ElementCountOverflow) {
  Raw r = one_tensor(0, {int64_t(1) << 32, int64_t(1) << 32, 4});
  r.zeros(32);
  EXPECT_HAS(open_error(r.b), "tensor 'x': element count of shape");
  EXPECT_HAS(open_error(r.b), "overflows int64");
  // Fits int64 elements, but not bytes (f32 is 4 bytes each).
  Raw b = one_tensor(0, {int64_t(1) << 31, int64_t(1) << 31});
  b.zeros(32);
  EXPECT_HAS(open_error(b.b), "byte size of shape [2147483648, 2147483648] overflows");
}

TEST(GgufErrors, AbsurdTensorCount) {
  Raw r;
  r.header(uint64_t(1) << 60, 0);
  EXPECT_HAS(open_error(r.b), "tensor count 1152921504606846976 is larger than the file could hold");
}

TEST(GgufErrors, AbsurdKvCount) {
  Raw r;
  r.header(0, 1000000).kv_u32("a", 1);
  EXPECT_HAS(open_error(r.b), "metadata count 1000000 is larger than the file could hold");
}

TEST(GgufErrors, AbsurdStringLength) {
  Raw r;
  r.header(0, 1).str("general.name").put<uint32_t>(8).put<uint64_t>(~uint64_t(0)).zeros(16);
  EXPECT_HAS(open_error(r.b), "string length 18446744073709551615 of key 'general.name'");
  Raw k;
  k.header(0, 1).put<uint64_t>(uint64_t(1) << 40).zeros(16);
  EXPECT_HAS(open_error(k.b), "string length 1099511627776 of key of metadata entry #0");
}

TEST(GgufErrors, AbsurdArrayLength) {
  Raw r;
  r.header(0, 1).str("tokenizer.ggml.tokens").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(uint64_t(1) << 62).zeros(64);
  EXPECT_HAS(open_error(r.b), "key 'tokenizer.ggml.tokens': array length 4611686018427387904 of string is larger than the file could hold");
}

TEST(GgufErrors, UnsupportedTensorType) {
  Raw r = one_tensor(0, {256}, 16);
  r.zeros(256);
  EXPECT_HAS(open_error(r.b),
             "tensor 'x': unsupported type 16 (iq2_xxs); supported: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, "
             "q5_1, iq4_nl, q2_K, q3_K, q4_K, q5_K, q6_K, q8_K, iq4_xs");
  Raw u = one_tensor(0, {8}, 1000);
  u.zeros(32);
  EXPECT_HAS(open_error(u.b), "unsupported type 1000 (type 1000)");
}

TEST(GgufErrors, RowNotMultipleOfBlock) {
  Raw r = one_tensor(0, {33, 2}, uint32_t(DType::Q4_0));
  r.zeros(64);
  EXPECT_HAS(open_error(r.b), "tensor 'x': row size 33 is not a multiple of the block size 32 of q4_0");
}

TEST(GgufErrors, DuplicateTensorName) {
  Raw r;
  r.header(2, 0).tensor("w", {8}, 0, 0).tensor("w", {8}, 0, 32).pad().zeros(64);
  EXPECT_HAS(open_error(r.b), "duplicate tensor name 'w'");
}

TEST(GgufErrors, DuplicateKey) {
  Raw r;
  r.header(0, 3).kv_u32("a", 1).kv_u32("b", 2).kv_str("a", "again");
  EXPECT_HAS(open_error(r.b), "duplicate metadata key 'a' (entries #0 and #2)");
}

TEST(GgufErrors, InvalidBool) {
  Raw r;
  r.header(0, 1).str("flag").put<uint32_t>(7).put<uint8_t>(2);
  EXPECT_HAS(open_error(r.b), "key 'flag': invalid bool value 2 at offset");
  Raw a;  // inside an array too
  a.header(0, 1).str("flags").put<uint32_t>(9).put<uint32_t>(7).put<uint64_t>(2).put<uint8_t>(1).put<uint8_t>(9);
  EXPECT_HAS(open_error(a.b), "key 'flags'[1]: invalid bool value 9");
}

TEST(GgufErrors, UnknownValueType) {
  Raw r;
  r.header(0, 1).str("k").put<uint32_t>(13).put<uint32_t>(0);
  EXPECT_HAS(open_error(r.b), "key 'k': unknown metadata value type 13 (expected 0..12)");
}

TEST(GgufErrors, ArraysNestedTooDeep) {
  Raw r;
  r.header(0, 1).str("deep").put<uint32_t>(9);
  for (int i = 0; i < 40; ++i) r.put<uint32_t>(9).put<uint64_t>(1);
  r.put<uint32_t>(0).put<uint64_t>(0);
  EXPECT_HAS(open_error(r.b), "arrays nested deeper than 16 levels");
}

TEST(GgufErrors, BadAlignment) {
  for (uint32_t a : {0u, 48u, 3u}) {
    Raw r;
    r.header(0, 1).kv_u32("general.alignment", a);
    EXPECT_HAS(open_error(r.b), "general.alignment must be a power of two > 0") << a;
    EXPECT_HAS(open_error(r.b), "got " + std::to_string(a)) << a;
  }
  Raw s;
  s.header(0, 1).kv_str("general.alignment", "64");
  EXPECT_HAS(open_error(s.b), "general.alignment: expected an unsigned integer, got string");
}

TEST(GgufErrors, MissingRequiredKeyAndWrongType) {
  Raw r;
  r.header(0, 2).kv_u32("n", 5).kv_str("s", "five");
  std::string path = gguf_test::temp_path("keys.gguf");
  gguf_test::write_bytes(path, r.b);
  auto f = File::open(path);
  EXPECT_EQ(f->get_int("n"), 5);
  EXPECT_EQ(f->get_str("s"), "five");
  EXPECT_FALSE(f->get_int_opt("absent").has_value());
  try {
    f->get_int("qwen3.block_count");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": missing required key 'qwen3.block_count'");
  }
  try {
    f->get_int("s");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": key 's': expected an integer, got string");
  }
  EXPECT_THROW(f->get_str("n"), Error);
  EXPECT_THROW(f->get_bool_opt("n"), Error);
  EXPECT_THROW(f->get("missing"), Error);
}

TEST(GgufErrors, EmptyAndMissingFile) {
  EXPECT_HAS(open_error({}), "truncated header: expected 4 bytes for magic");
  EXPECT_THROW(File::open(gguf_test::temp_path("does_not_exist.gguf")), Error);
}

}  // namespace
