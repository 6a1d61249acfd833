// Read-only memory mapping of a whole file. Errors name the path.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace lmf {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// The whole of a file as a string: a regular file through MappedFile, anything else that can be
// read (a pipe, /dev/stdin) by reading it to its end. Errors name the path.
std::string read_file(const std::string& path);

}  // namespace lmf
