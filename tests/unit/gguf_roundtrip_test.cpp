// Writer -> reader round trips: every value type, nested arrays, several tensor types and
// shapes, custom alignment, streaming producers, and the tmp-then-rename contract.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>

#include "gguf_test_util.h"

using namespace lmf;
using namespace lmf::gguf;
using gguf_test::same_value;

namespace {

std::vector<std::pair<std::string, Value>> all_values() {
  using L64 = std::numeric_limits<int64_t>;
  std::vector<std::pair<std::string, Value>> kv = {
      {"t.u8", {VType::U8, uint64_t(255)}},
      {"t.i8", {VType::I8, int64_t(-128)}},
      {"t.u16", {VType::U16, uint64_t(65535)}},
      {"t.i16", {VType::I16, int64_t(-32768)}},
      {"t.u32", Value::u32(4294967295u)},
      {"t.i32", Value::i32(-2147483647 - 1)},
      {"t.u64", Value::u64(~uint64_t(0))},
      {"t.i64", {VType::I64, int64_t(L64::min())}},
      {"t.f32", Value::f32(-1.5e-7f)},
      {"t.f64", {VType::F64, 3.141592653589793}},
      {"t.bool_t", Value::boolean(true)},
      {"t.bool_f", Value::boolean(false)},
      {"t.str", Value::str("héllo\nwörld \xe2\x96\x81")},
      {"t.str_empty", Value::str("")},
      {"t.strs", Value::strs({"a", "", "ccc"})},
      {"t.i32s", Value::i32s({1, -2, 2147483647})},
      {"t.f32s", Value::f32s({0.5f, -0.0f, std::numeric_limits<float>::infinity()})},
      {"t.empty", Value::arr(VType::U8, {})},
      {"t.bools", Value::arr(VType::BOOL, {Value::boolean(true), Value::boolean(false)})},
      {"t.u64s", Value::arr(VType::U64, {Value::u64(1), Value::u64(uint64_t(1) << 63)})},
      {"t.f64s", Value::arr(VType::F64, {{VType::F64, 1e300}, {VType::F64, -2.0}})},
      {"t.i8s", Value::arr(VType::I8, {{VType::I8, int64_t(-1)}, {VType::I8, int64_t(127)}})},
  };
  // Arrays of arrays: [[1, 2], [], [3]] and [["x"], ["y", "z"]] and three levels deep.
  kv.push_back({"t.nested_i32", Value::arr(VType::ARR, {Value::i32s({1, 2}), Value::i32s({}), Value::i32s({3})})});
  kv.push_back({"t.nested_str", Value::arr(VType::ARR, {Value::strs({"x"}), Value::strs({"y", "z"})})});
  kv.push_back({"t.nested3", Value::arr(VType::ARR, {Value::arr(VType::ARR, {Value::f32s({1.25f})})})});
  return kv;
}

struct TensorCase {
  std::string name;
  DType type;
  std::vector<int64_t> ne;
};

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> b(n);
  uint32_t s = seed * 2654435761u + 1;
  for (auto& x : b) {
    s = s * 1664525u + 1013904223u;
    x = uint8_t(s >> 24);
  }
  return b;
}

TEST(GgufRoundTrip, AllValueTypesAndTensors) {
  const std::vector<TensorCase> cases = {
      {"f32.vec", DType::F32, {7}},
      {"f16.mat", DType::F16, {3, 5}},
      {"bf16.3d", DType::BF16, {4, 2, 3}},
      {"q8_0.mat", DType::Q8_0, {64, 3}},
      {"q4_0.4d", DType::Q4_0, {32, 2, 2, 2}},
      {"q4_1.vec", DType::Q4_1, {96}},
      {"f32.scalar_like", DType::F32, {1, 1, 1, 1}},
  };
  for (size_t alignment : {size_t(32), size_t(64), size_t(1), size_t(4096)}) {
    SCOPED_TRACE("alignment " + std::to_string(alignment));
    Writer w;
    auto kv = all_values();
    for (const auto& [k, v] : kv) w.set(k, v);
    w.set_alignment(alignment);
    std::vector<std::vector<uint8_t>> datas;
    datas.reserve(cases.size());  // producers hold pointers into it
    for (size_t i = 0; i < cases.size(); ++i) {
      const auto& c = cases[i];
      size_t n = row_bytes(c.type, c.ne[0]) * size_t(std::accumulate(c.ne.begin() + 1, c.ne.end(), int64_t(1), std::multiplies<>()));
      datas.push_back(pattern(n, uint32_t(i)));
      if (i % 2 == 0) {  // data given now
        w.add_tensor(c.name, c.type, c.ne, datas.back().data());
      } else {  // stream through a producer, as the converter does
        const auto* src = &datas.back();
        w.add_tensor(c.name, c.type, c.ne, [src](uint8_t* dst) { std::memcpy(dst, src->data(), src->size()); });
      }
    }
    std::string path = gguf_test::temp_path("rt_" + std::to_string(alignment) + ".gguf");
    int64_t last_done = 0;
    w.write(path, [&](uint64_t, int64_t done, int64_t total) {
      EXPECT_EQ(done, last_done + 1);
      EXPECT_EQ(total, int64_t(cases.size()));
      last_done = done;
    });
    EXPECT_EQ(last_done, int64_t(cases.size()));
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

    auto f = File::open(path);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), alignment);
    EXPECT_EQ(f->data_offset() % alignment, 0u);
    EXPECT_EQ(f->file_size(), f->data_offset() + w.data_bytes());
    // Metadata: same keys in the same order (plus general.alignment when not the default).
    size_t extra = alignment != 32 ? 1 : 0;
    ASSERT_EQ(f->metadata().size(), kv.size() + extra);
    for (size_t i = 0; i < kv.size(); ++i) {
      EXPECT_EQ(f->metadata()[i].first, kv[i].first);
      EXPECT_TRUE(same_value(f->metadata()[i].second, kv[i].second, kv[i].first));
    }
    if (extra) {
      EXPECT_EQ(f->get_int("general.alignment"), int64_t(alignment));
    }
    EXPECT_TRUE(std::isinf(f->get("t.f32s").as_arr().items[2].as_float()));
    EXPECT_TRUE(std::signbit(f->get("t.f32s").as_arr().items[1].as_float()));

    // Tensors: same order, types, shapes and bytes; data aligned in the file; zero padding.
    auto bytes = gguf_test::read_bytes(path);
    ASSERT_EQ(f->tensors().size(), cases.size());
    uint64_t prev_end = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const TensorInfo& t = f->tensors()[i];
      EXPECT_EQ(t.name, cases[i].name);
      EXPECT_EQ(t.type, cases[i].type);
      EXPECT_EQ(t.ne, cases[i].ne);
      ASSERT_EQ(t.nbytes, datas[i].size());
      EXPECT_EQ(t.offset % alignment, 0u);
      EXPECT_EQ(std::memcmp(t.data, datas[i].data(), t.nbytes), 0) << t.name;
      EXPECT_EQ(f->find_tensor(t.name), &t);
      for (uint64_t o = prev_end; o < t.offset; ++o) EXPECT_EQ(bytes[f->data_offset() + o], 0) << o;
      prev_end = t.offset + t.nbytes;
    }
    EXPECT_EQ(f->find_tensor("nope"), nullptr);
  }
}

TEST(GgufRoundTrip, ReadThenWriteIsByteExact) {
  Writer w;
  for (const auto& [k, v] : all_values()) w.set(k, v);
  auto d = pattern(64 * 34 / 32 * 2, 7);
  w.add_tensor("a", DType::Q8_0, {64, 2}, d.data());
  std::string p1 = gguf_test::temp_path("rw1.gguf"), p2 = gguf_test::temp_path("rw2.gguf");
  w.write(p1);
  auto f = File::open(p1);
  Writer w2;
  for (const auto& [k, v] : f->metadata()) w2.set(k, v);
  for (const auto& t : f->tensors()) w2.add_tensor(t.name, t.type, t.ne, t.data);
  w2.write(p2);
  EXPECT_EQ(gguf_test::read_bytes(p1), gguf_test::read_bytes(p2));
}

TEST(GgufRoundTrip, SetReplacesKeepingPosition) {
  Writer w;
  w.set("a", Value::u32(1));
  w.set("b", Value::u32(2));
  w.set("a", Value::str("x"));
  std::string p = gguf_test::temp_path("replace.gguf");
  w.write(p);
  auto f = File::open(p);
  ASSERT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->metadata()[0].first, "a");
  EXPECT_EQ(f->get_str("a"), "x");
}

TEST(GgufWriter, AlignmentKeyIsWrittenAsUint32) {
  Writer w;
  w.set("general.alignment", Value::u64(256));
  std::vector<float> x(8, 2.0f);
  w.add_tensor("a", DType::F32, {8}, x.data());
  w.add_tensor("b", DType::F32, {8}, x.data());
  std::string p = gguf_test::temp_path("align_u64.gguf");
  w.write(p);
  auto f = File::open(p);
  EXPECT_EQ(f->get("general.alignment").type, VType::U32);
  EXPECT_EQ(f->alignment(), 256u);
  EXPECT_EQ(f->find_tensor("b")->offset, 256u);
}

TEST(GgufWriter, FailedWriteLeavesNoFile) {
  std::string path = gguf_test::temp_path("fail.gguf");
  gguf_test::write_bytes(path, {1, 2, 3});  // an older file at path must survive
  Writer w;
  std::vector<float> x(8, 1.0f);
  w.add_tensor("ok", DType::F32, {8}, x.data());
  w.add_tensor("boom", DType::F32, {8}, [](uint8_t*) { throw Error("producer failed"); });
  EXPECT_THROW(w.write(path), Error);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_EQ(gguf_test::read_bytes(path), (std::vector<uint8_t>{1, 2, 3}));
}

TEST(GgufWriter, RejectsBadInput) {
  Writer w;
  std::vector<float> x(64);
  w.add_tensor("t", DType::F32, {8}, x.data());
  EXPECT_THROW(w.add_tensor("t", DType::F32, {8}, x.data()), Error);            // duplicate
  EXPECT_THROW(w.add_tensor("q", DType::Q4_0, {33}, x.data()), Error);          // not a block multiple
  EXPECT_THROW(w.add_tensor("z", DType::F32, {8, 0}, x.data()), Error);         // empty dim
  EXPECT_THROW(w.add_tensor("d", DType::F32, {1, 1, 1, 1, 1}, x.data()), Error);  // 5 dims
  EXPECT_THROW(w.set_alignment(48), Error);
  EXPECT_THROW(w.set("general.alignment", Value::u32(0)), Error);
  // A value that does not fit its declared type fails before any file is created.
  w.set("bad", {VType::U8, uint64_t(300)});
  std::string path = gguf_test::temp_path("badval.gguf");
  std::filesystem::remove(path);
  EXPECT_THROW(w.write(path), Error);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  Writer m;
  m.set("mixed", Value::arr(VType::I32, {Value::i32(1), Value::str("no")}));
  EXPECT_THROW(m.write(path), Error);
}

TEST(GgufTypes, Table) {
  EXPECT_EQ(row_bytes(DType::Q4_0, 64), 36u);
  EXPECT_EQ(row_bytes(DType::Q4_1, 32), 20u);
  EXPECT_EQ(row_bytes(DType::Q8_0, 96), 102u);
  EXPECT_EQ(row_bytes(DType::BF16, 3), 6u);
  EXPECT_THROW(row_bytes(DType::Q8_0, 31), Error);
  EXPECT_EQ(parse_dtype("Q4_1"), DType::Q4_1);
  EXPECT_EQ(parse_dtype("bf16"), DType::BF16);
  EXPECT_EQ(parse_dtype("q4_k"), DType::Q4_K);
  EXPECT_FALSE(parse_dtype("q4_k_m").has_value());
  EXPECT_TRUE(dtype_supported(30));
  EXPECT_TRUE(dtype_supported(12));
  EXPECT_FALSE(dtype_supported(16));  // iq2_xxs
  EXPECT_STREQ(ggml_type_name(12), "q4_K");
  EXPECT_STREQ(ggml_type_name(999), "type 999");
}

}  // namespace
