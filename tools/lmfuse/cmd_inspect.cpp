// lmfuse inspect: a GGUF file's header, metadata (long arrays abbreviated), tensor table and
// totals (tensor count, parameters, size, bits per weight) and the type mix (tensors and bytes per type).
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <map>
#include <string>

#include "cli_common.h"
#include "format/gguf/gguf.h"
#include "util/status.h"

namespace lmf::cli {
namespace {

using gguf::Value;
using gguf::VType;

std::string quote(const std::string& s, size_t max_chars) {
  std::string out = "\"";
  size_t n = 0;
  for (unsigned char c : s) {
    if (n++ == max_chars) {
      out += "...";
      break;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 32 || c == 127) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

// Shortest text that reads back to the same number (float32 values at float precision).
std::string number(double d, bool single) {
  char buf[64];
  auto r = single ? std::to_chars(buf, buf + sizeof buf, float(d)) : std::to_chars(buf, buf + sizeof buf, d);
  return std::string(buf, r.ptr);
}

std::string format_value(const Value& v, size_t max_items) {
  switch (v.type) {
    case VType::BOOL: return v.as_bool() ? "true" : "false";
    case VType::STR: return quote(v.as_str(), 80);
    case VType::F32: return number(v.as_float(), true);
    case VType::F64: return number(v.as_float(), false);
    case VType::ARR: {
      const gguf::Array& a = v.as_arr();
      std::string out = "[" + std::string(gguf::vtype_name(a.elem)) + " x " + std::to_string(a.items.size()) + "] [";
      size_t shown = std::min(a.items.size(), max_items);
      for (size_t i = 0; i < shown; ++i) {
        if (i) out += ", ";
        // Items inside arrays show fewer sub-items so one line stays readable.
        out += a.elem == VType::STR ? quote(a.items[i].as_str(), 24) : format_value(a.items[i], std::max<size_t>(1, max_items / 2));
      }
      if (shown < a.items.size()) out += ", ...";
      return out + "]";
    }
    default:
      if (const auto* u = std::get_if<uint64_t>(&v.v)) return std::to_string(*u);
      if (const auto* i = std::get_if<int64_t>(&v.v)) return std::to_string(*i);
      return "?";
  }
}

std::string shape(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

std::string human_count(double n) {
  char buf[32];
  if (n >= 1e9) std::snprintf(buf, sizeof buf, "%.2f B", n / 1e9);
  else if (n >= 1e6) std::snprintf(buf, sizeof buf, "%.2f M", n / 1e6);
  else if (n >= 1e3) std::snprintf(buf, sizeof buf, "%.2f K", n / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

}  // namespace

int cmd_inspect(int argc, char** argv) {
  CLI::App app{"Print a GGUF file's header, metadata, tensors and totals.\n\n"
               "examples:\n"
               "  lmfuse inspect models/qwen3-0.6b-q4_1.gguf\n"
               "  lmfuse inspect --items 3 --no-tensors model.gguf",
               "lmfuse inspect"};
  std::string path;
  size_t max_items = 8;
  bool no_tensors = false;
  app.add_option("file", path, "GGUF file")->required();
  app.add_option("--items", max_items, "array items to show before abbreviating (default 8)");
  app.add_flag("--no-tensors", no_tensors, "omit the tensor table (totals are still printed)");
  CLI11_PARSE(app, argc, argv);

  auto f = gguf::File::open(path);
  std::printf("file:       %s\n", f->path().c_str());
  std::printf("version:    %u\n", f->version());
  std::printf("alignment:  %zu\n", f->alignment());
  std::printf("file size:  %zu bytes (data section at offset %llu)\n", f->file_size(),
              (unsigned long long)f->data_offset());

  const auto& kv = f->metadata();
  size_t key_w = 0;
  for (const auto& [k, v] : kv) key_w = std::max(key_w, k.size());
  std::printf("\nmetadata (%zu keys):\n", kv.size());
  for (const auto& [k, v] : kv)
    std::printf("  %-*s  %-8s %s\n", int(key_w), k.c_str(), gguf::vtype_name(v.type), format_value(v, max_items).c_str());

  const auto& ts = f->tensors();
  int64_t params = 0;
  uint64_t bytes = 0;
  for (const auto& t : ts) {
    params += t.nelements();
    bytes += t.nbytes;
  }
  if (!no_tensors) {
    size_t name_w = 4, shape_w = 5;
    for (const auto& t : ts) {
      name_w = std::max(name_w, t.name.size());
      shape_w = std::max(shape_w, shape(t.ne).size());
    }
    std::printf("\ntensors (%zu):\n  %-*s  %-6s  %-*s  %12s\n", ts.size(), int(name_w), "name", "type", int(shape_w),
                "shape", "bytes");
    for (const auto& t : ts)
      std::printf("  %-*s  %-6s  %-*s  %12zu\n", int(name_w), t.name.c_str(), dtype_name(t.type), int(shape_w),
                  shape(t.ne).c_str(), t.nbytes);
  }
  std::printf("\ntotals:\n");
  std::printf("  tensors:         %zu\n", ts.size());
  std::printf("  parameters:      %lld (%s)\n", (long long)params, human_count(double(params)).c_str());
  std::printf("  tensor data:     %.2f MiB (%.3f GiB)\n", double(bytes) / (1 << 20), double(bytes) / (1 << 30));
  if (params > 0) std::printf("  bits per weight: %.3f\n", double(bytes) * 8.0 / double(params));

  // The type mix (a K-quant "_M" file is several types): tensors, bytes and bits per weight of each.
  struct Mix {
    size_t count = 0;
    uint64_t bytes = 0;
    int64_t params = 0;
  };
  std::map<uint32_t, Mix> mix;
  for (const auto& t : ts) {
    Mix& m = mix[uint32_t(t.type)];
    ++m.count;
    m.bytes += t.nbytes;
    m.params += t.nelements();
  }
  std::printf("\ntypes:\n");
  for (const auto& [id, m] : mix)
    std::printf("  %-7s %5zu tensors  %10.2f MiB  %5.1f %%  %6.3f bits/weight\n", dtype_name(DType(id)), m.count,
                double(m.bytes) / (1 << 20), bytes ? 100.0 * double(m.bytes) / double(bytes) : 0.0,
                m.params ? double(m.bytes) * 8.0 / double(m.params) : 0.0);
  return 0;
}

}  // namespace lmf::cli
