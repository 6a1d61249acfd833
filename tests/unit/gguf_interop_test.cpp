// Interop with the reference implementation (the `gguf` PyPI package, maintained with
// llama.cpp): files we write must parse in gguf.GGUFReader with the same values, and files
// gguf.GGUFWriter writes must parse here with the same values. Skipped when gguf is missing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "format/quant/half.h"
#include "gguf_test_util.h"

using namespace lmf;
using namespace lmf::gguf;

namespace {

bool have_python_gguf() {
  return std::system(LMFUSE_PYTHON " -c 'import gguf, numpy' >/dev/null 2>&1") == 0;
}

int run_python(const std::string& name, const std::string& script, const std::string& arg) {
  std::string py = gguf_test::temp_path(name);
  std::ofstream(py) << script;
  return std::system((std::string(LMFUSE_PYTHON) + " '" + py + "' '" + arg + "'").c_str());
}

// Checks, in Python, every value and tensor of the file written by OursReadByPython.
const char* kReadScript = R"PY(
import sys, numpy as np, gguf
path = sys.argv[1]
r = gguf.GGUFReader(path)
T = gguf.GGUFValueType
def check(key, types, value):
    f = r.fields[key]
    assert f.types == types, (key, f.types, types)
    got = f.contents()
    assert got == value, (key, got, value)
check("general.architecture", [T.STRING], "interop")
check("t.u8", [T.UINT8], 200)
check("t.i8", [T.INT8], -100)
check("t.u16", [T.UINT16], 60000)
check("t.i16", [T.INT16], -30000)
check("t.u32", [T.UINT32], 4000000000)
check("t.i32", [T.INT32], -2000000000)
check("t.u64", [T.UINT64], 2**64 - 1)
check("t.i64", [T.INT64], -2**63)
check("t.f32", [T.FLOAT32], 0.25)
check("t.f64", [T.FLOAT64], -1e300)
check("t.bool", [T.BOOL], True)
check("t.str", [T.STRING], "h\u00e9llo \u2581")
check("t.strs", [T.ARRAY, T.STRING], ["a", "", "xyz"])
check("t.i32s", [T.ARRAY, T.INT32], [1, -2, 3])
check("t.f32s", [T.ARRAY, T.FLOAT32], [0.5, -1.5])
# Nested [[1, 2], [3]]: gguf-py keeps the raw parts after the key (array header, sub-arrays).
f = r.fields["t.nested"]
assert f.types == [T.ARRAY, T.ARRAY, T.INT32], f.types
parts = [p.tolist() for p in f.parts[2:]]
assert parts == [[9], [9], [2], [5], [2], [1], [2], [5], [1], [3]], parts
assert r.alignment == 64, r.alignment
assert int(r.fields["general.alignment"].contents()) == 64
want = {"w.f32": (0, [5, 3]), "w.f16": (1, [4]), "w.bf16": (30, [2, 2]), "w.q8_0": (8, [64, 2]),
        "w.q4_0": (2, [32]), "w.q4_1": (3, [32, 3])}
assert len(r.tensors) == len(want)
for t in r.tensors:
    typ, shape = want[t.name]
    assert int(t.tensor_type) == typ, (t.name, t.tensor_type)
    assert t.shape.tolist() == shape, (t.name, t.shape)
    assert t.data_offset % 64 == 0
    raw = open(path + "." + t.name + ".bin", "rb").read()
    assert t.data.tobytes() == raw, t.name
    assert t.n_bytes == len(raw)
# Dequantized values through gguf's own reference code.
t = {t.name: t for t in r.tensors}
assert np.array_equal(gguf.quants.dequantize(t["w.f32"].data, gguf.GGMLQuantizationType.F32).ravel(),
                      np.arange(15, dtype=np.float32) * 0.5 - 3)
print("python read ok")
)PY";

TEST(GgufInterop, OursReadByPython) {
  if (!have_python_gguf()) GTEST_SKIP() << "python gguf not importable";
  Writer w;
  w.set("general.architecture", Value::str("interop"));
  w.set("t.u8", {VType::U8, uint64_t(200)});
  w.set("t.i8", {VType::I8, int64_t(-100)});
  w.set("t.u16", {VType::U16, uint64_t(60000)});
  w.set("t.i16", {VType::I16, int64_t(-30000)});
  w.set("t.u32", Value::u32(4000000000u));
  w.set("t.i32", Value::i32(-2000000000));
  w.set("t.u64", Value::u64(~uint64_t(0)));
  w.set("t.i64", {VType::I64, int64_t(INT64_MIN)});
  w.set("t.f32", Value::f32(0.25f));
  w.set("t.f64", {VType::F64, -1e300});
  w.set("t.bool", Value::boolean(true));
  w.set("t.str", Value::str("h\xc3\xa9llo \xe2\x96\x81"));
  w.set("t.strs", Value::strs({"a", "", "xyz"}));
  w.set("t.i32s", Value::i32s({1, -2, 3}));
  w.set("t.f32s", Value::f32s({0.5f, -1.5f}));
  w.set("t.nested", Value::arr(VType::ARR, {Value::i32s({1, 2}), Value::i32s({3})}));
  w.set_alignment(64);

  std::string path = gguf_test::temp_path("ours.gguf");
  std::vector<float> f32(15);
  for (int i = 0; i < 15; ++i) f32[i] = float(i) * 0.5f - 3;
  std::vector<uint16_t> f16 = {f32_to_fp16(1.0f), f32_to_fp16(-2.5f), f32_to_fp16(0.0f), f32_to_fp16(65504.0f)};
  std::vector<uint16_t> bf16 = {f32_to_bf16(1.0f), f32_to_bf16(-3.0f), f32_to_bf16(1e30f), f32_to_bf16(0.125f)};
  // Quantized payloads: arbitrary bytes are valid blocks as far as the container is concerned.
  std::vector<uint8_t> q8(4 * 34), q40(18), q41(3 * 20);  // [64,2] q8_0 is 4 blocks
  for (size_t i = 0; i < q8.size(); ++i) q8[i] = uint8_t(i * 7 + 1);
  for (size_t i = 0; i < q40.size(); ++i) q40[i] = uint8_t(i * 13 + 5);
  for (size_t i = 0; i < q41.size(); ++i) q41[i] = uint8_t(255 - i);
  struct T { const char* name; DType type; std::vector<int64_t> ne; const void* data; size_t n; };
  std::vector<T> ts = {{"w.f32", DType::F32, {5, 3}, f32.data(), 60}, {"w.f16", DType::F16, {4}, f16.data(), 8},
                       {"w.bf16", DType::BF16, {2, 2}, bf16.data(), 8}, {"w.q8_0", DType::Q8_0, {64, 2}, q8.data(), q8.size()},
                       {"w.q4_0", DType::Q4_0, {32}, q40.data(), q40.size()}, {"w.q4_1", DType::Q4_1, {32, 3}, q41.data(), q41.size()}};
  for (const auto& t : ts) {
    w.add_tensor(t.name, t.type, t.ne, t.data);
    gguf_test::write_bytes(path + "." + t.name + ".bin",
                           std::vector<uint8_t>((const uint8_t*)t.data, (const uint8_t*)t.data + t.n));
  }
  w.write(path);
  EXPECT_EQ(run_python("read_ours.py", kReadScript, path), 0);
}

// Writes a file with gguf.GGUFWriter (custom alignment, nested arrays, real quantized
// tensors made by gguf.quants) plus each tensor's raw bytes beside it.
const char* kWriteScript = R"PY(
import sys, numpy as np, gguf
path = sys.argv[1]
Q = gguf.GGMLQuantizationType
w = gguf.GGUFWriter(path, "pyarch")
w.add_custom_alignment(128)
w.add_uint8("p.u8", 7); w.add_int8("p.i8", -7); w.add_uint16("p.u16", 65535); w.add_int16("p.i16", -2)
w.add_uint32("p.u32", 123456789); w.add_int32("p.i32", -123456789)
w.add_uint64("p.u64", 2**40 + 3); w.add_int64("p.i64", -2**40)
w.add_float32("p.f32", 1.5); w.add_float64("p.f64", 0.1); w.add_bool("p.bool", False)
w.add_string("p.str", "\u4f60\u597d")
w.add_array("p.strs", ["x", "yy"])
w.add_array("p.nested", [[1, 2, 3], [4]])
w.add_array("p.nested_str", [["a"], ["b", "c"]])
rng = np.random.default_rng(0)
x = rng.standard_normal((3, 64)).astype(np.float32)
tensors = {
    "t.f32": (x, None),
    "t.f16": (x.astype(np.float16), None),
    "t.bf16": (gguf.quants.quantize(x, Q.BF16), Q.BF16),
    "t.q8_0": (gguf.quants.quantize(x, Q.Q8_0), Q.Q8_0),
    "t.q4_0": (gguf.quants.quantize(x, Q.Q4_0), Q.Q4_0),
    "t.q4_1": (gguf.quants.quantize(x, Q.Q4_1), Q.Q4_1),
}
for name, (a, q) in tensors.items():
    w.add_tensor(name, a, raw_dtype=q)
    open(path + "." + name + ".bin", "wb").write(a.tobytes())
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
)PY";

TEST(GgufInterop, PythonWrittenReadByUs) {
  if (!have_python_gguf()) GTEST_SKIP() << "python gguf not importable";
  std::string path = gguf_test::temp_path("theirs.gguf");
  ASSERT_EQ(run_python("write_theirs.py", kWriteScript, path), 0);
  auto f = File::open(path);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 128u);
  EXPECT_EQ(f->get_str("general.architecture"), "pyarch");
  EXPECT_EQ(f->get("p.u8").type, VType::U8);
  EXPECT_EQ(f->get_int("p.u8"), 7);
  EXPECT_EQ(f->get_int("p.i8"), -7);
  EXPECT_EQ(f->get_int("p.u16"), 65535);
  EXPECT_EQ(f->get_int("p.i16"), -2);
  EXPECT_EQ(f->get_int("p.u32"), 123456789);
  EXPECT_EQ(f->get_int("p.i32"), -123456789);
  EXPECT_EQ(f->get("p.u64").type, VType::U64);
  EXPECT_EQ(f->get_int("p.u64"), (int64_t(1) << 40) + 3);
  EXPECT_EQ(f->get_int("p.i64"), -(int64_t(1) << 40));
  EXPECT_EQ(f->get_float("p.f32"), 1.5);
  EXPECT_EQ(f->get("p.f64").type, VType::F64);
  EXPECT_EQ(f->get_float("p.f64"), 0.1);
  EXPECT_EQ(f->get_bool_opt("p.bool"), false);
  EXPECT_EQ(f->get_str("p.str"), "\xe4\xbd\xa0\xe5\xa5\xbd");
  EXPECT_TRUE(gguf_test::same_value(f->get("p.strs"), Value::strs({"x", "yy"})));
  EXPECT_TRUE(gguf_test::same_value(f->get("p.nested"),
                                    Value::arr(VType::ARR, {Value::i32s({1, 2, 3}), Value::i32s({4})})));
  EXPECT_TRUE(gguf_test::same_value(f->get("p.nested_str"),
                                    Value::arr(VType::ARR, {Value::strs({"a"}), Value::strs({"b", "c"})})));
  const std::vector<std::pair<std::string, DType>> want = {{"t.f32", DType::F32},   {"t.f16", DType::F16},
                                                           {"t.bf16", DType::BF16}, {"t.q8_0", DType::Q8_0},
                                                           {"t.q4_0", DType::Q4_0}, {"t.q4_1", DType::Q4_1}};
  ASSERT_EQ(f->tensors().size(), want.size());
  for (const auto& [name, type] : want) {
    const TensorInfo* t = f->find_tensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->type, type) << name;
    EXPECT_EQ(t->ne, (std::vector<int64_t>{64, 3})) << name;
    EXPECT_EQ((f->data_offset() + t->offset) % 128, 0u) << name;
    auto raw = gguf_test::read_bytes(path + "." + name + ".bin");
    ASSERT_EQ(t->nbytes, raw.size()) << name;
    EXPECT_EQ(std::memcmp(t->data, raw.data(), raw.size()), 0) << name;
  }
}

}  // namespace
