// The on-disk cache of sample indices (format: FORMAT.md beside this file). A cache file holds a
// description of everything the indices depend on, the index arrays, and a SHA-256 of the whole
// file; its name is the SHA-256 of the description, so a changed input gives another file, and a
// damaged file fails its checksum and is rebuilt. Files are written under a temporary name,
// fsynced and renamed into place; a lock file lets the ranks of one node build an index once
// while the others wait and then read it.
#ifndef MT_WORKER_DATA_INDEX_CACHE_H_
#define MT_WORKER_DATA_INDEX_CACHE_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace mt::data {

inline constexpr char kIndexCacheMagic[8] = {'M', 'T', 'S', 'M', 'P', 'I', 'D', 'X'};
inline constexpr uint32_t kIndexCacheVersion = 1;

// Lower-case hex SHA-256 of `data`.
std::string Sha256Hex(absl::string_view data);

// One array to store: element_size bytes per element (2, 4 or 8), little-endian.
struct CacheArray {
  uint32_t element_size = 0;
  const void* data = nullptr;
  uint64_t count = 0;

  template <typename T>
  static CacheArray Of(const std::vector<T>& v) {
    return CacheArray{static_cast<uint32_t>(sizeof(T)), v.data(), v.size()};
  }
};

// Writes `arrays` with `description` to `path` atomically (temporary file, fsync, rename, fsync of
// the directory). The directory must exist.
absl::Status WriteIndexCache(const std::string& path, absl::string_view description,
                             absl::Span<const CacheArray> arrays);

// A cache file read back whole and checked: magic, version, sizes, checksum, and that its
// description equals the expected one. Thread-compatible.
class IndexCacheFile {
 public:
  // NotFound when there is no file; DataLoss when it is damaged, truncated, of another version,
  // or describes other indices (the caller rebuilds it).
  static absl::StatusOr<IndexCacheFile> Read(const std::string& path,
                                             absl::string_view expected_description);

  size_t num_arrays() const { return arrays_.size(); }
  // Copies array i into a vector of T; DataLoss if its element size is not sizeof(T).
  template <typename T>
  absl::StatusOr<std::vector<T>> Array(size_t i) const {
    if (i >= arrays_.size()) return absl::DataLossError(Describe(i, "is missing"));
    if (arrays_[i].element_size != sizeof(T)) {
      return absl::DataLossError(Describe(i, "has the wrong element size"));
    }
    std::vector<T> out(arrays_[i].count);
    if (!out.empty())
      std::memcpy(out.data(), contents_.data() + arrays_[i].offset, out.size() * sizeof(T));
    return out;
  }

 private:
  struct Entry {
    uint32_t element_size;
    uint64_t count;
    uint64_t offset;  // in contents_
  };
  std::string Describe(size_t i, absl::string_view what) const;

  std::string path_;
  std::string contents_;
  std::vector<Entry> arrays_;
};

// An exclusive advisory lock (flock) on `<path>.lock`, held until destruction. Thread-compatible;
// movable.
class CacheLock {
 public:
  static absl::StatusOr<CacheLock> Acquire(const std::string& path);
  CacheLock(CacheLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  CacheLock& operator=(CacheLock&& other) noexcept;
  CacheLock(const CacheLock&) = delete;
  CacheLock& operator=(const CacheLock&) = delete;
  ~CacheLock();

 private:
  explicit CacheLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// Creates `dir` and its parents (mkdir -p).
absl::Status MakeDirectories(const std::string& dir);

}  // namespace mt::data

#endif  // MT_WORKER_DATA_INDEX_CACHE_H_
