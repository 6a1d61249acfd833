// A checkpoint folder: one model.safetensors, or shards listed by model.safetensors.index.json.
// The index is checked against the shards: a missing shard file, or a tensor the index places
// in a shard that does not hold it, is an error naming both.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "format/safetensors/safetensors.h"
#include "util/mmap.h"
#include "util/status.h"

namespace lmf::safetensors {

namespace fs = std::filesystem;

void Checkpoint::add(std::unique_ptr<File> f) {
  for (const Tensor& t : f->tensors()) {
    auto [it, fresh] = index_.emplace(t.name, &t);
    if (!fresh) LMF_FAIL("tensor '", t.name, "' appears in both ", it->second->file, " and ", t.file);
  }
  files_.push_back(std::move(f));
}

Checkpoint Checkpoint::open_dir(const std::string& dir) {
  Checkpoint c;
  const fs::path d(dir);
  if (!fs::is_directory(d)) LMF_FAIL(dir, ": not a directory (expected a Hugging Face checkpoint folder)");
  const fs::path single = d / "model.safetensors";
  const fs::path index = d / "model.safetensors.index.json";
  if (fs::exists(index)) {
    const std::string text = read_file(index.string());
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      LMF_FAIL(index.string(), ": not valid JSON: ", e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      LMF_FAIL(index.string(), ": expected an object with a 'weight_map' object");
    // Shards in sorted order (model-00001-of-0000N first), each opened once.
    std::set<std::string> shards;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) LMF_FAIL(index.string(), ": weight_map['", it.key(), "'] must be a file name");
      const std::string s = it.value().get<std::string>();
      if (s.find('/') != std::string::npos || s == ".." || s.empty())
        LMF_FAIL(index.string(), ": weight_map['", it.key(), "'] = '", s, "' is not a file name in ", dir);
      if (!fs::exists(d / s))
        LMF_FAIL((d / s).string(), ": missing shard (listed in model.safetensors.index.json for tensor '",
                 it.key(), "')");
      shards.insert(s);
    }
    if (shards.empty()) LMF_FAIL(index.string(), ": weight_map is empty");
    for (const auto& s : shards) c.add(File::open((d / s).string()));
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      const Tensor* t = c.find(it.key());
      const std::string want = (d / it.value().get<std::string>()).string();
      if (!t) LMF_FAIL(want, ": does not hold tensor '", it.key(), "' (model.safetensors.index.json says it does)");
      if (t->file != want)
        LMF_FAIL(index.string(), ": places tensor '", it.key(), "' in ", want, " but it is in ", t->file);
    }
    return c;
  }
  if (fs::exists(single)) {
    c.add(File::open(single.string()));
    return c;
  }
  for (const auto& e : fs::directory_iterator(d)) {
    if (e.path().extension() == ".safetensors")
      LMF_FAIL(dir, ": found ", e.path().filename().string(),
               " but no model.safetensors.index.json (needed to read a sharded checkpoint)");
  }
  LMF_FAIL(dir, ": no model.safetensors or model.safetensors.index.json");
}

const Tensor* Checkpoint::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : it->second;
}

std::vector<const Tensor*> Checkpoint::tensors() const {
  std::vector<const Tensor*> out;
  for (const auto& f : files_)
    for (const Tensor& t : f->tensors()) out.push_back(&t);
  return out;
}

}  // namespace lmf::safetensors
