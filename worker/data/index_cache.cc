#include "worker/data/index_cache.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/base/errors.h"
#include "common/base/files.h"
#include "common/base/status_macros.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the index cache stores host arrays as little-endian");

namespace mt::data {
namespace {

constexpr size_t kDigestBytes = 32;
// magic (8) + version (4) + array count (4) + description length (8).
constexpr size_t kFixedHeaderBytes = 24;
constexpr size_t kArrayEntryBytes = 16;  // element size (4) + reserved (4) + count (8)
constexpr uint32_t kMaxArrays = 64;

struct DigestDeleter {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr); }
  void Update(const void* data, size_t n) {
    if (n > 0) EVP_DigestUpdate(ctx_.get(), data, n);
  }
  std::string Final() {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx_.get(), out, &len);
    return std::string(reinterpret_cast<const char*>(out), len);
  }

 private:
  std::unique_ptr<EVP_MD_CTX, DigestDeleter> ctx_;
};

template <typename T>
void PutLE(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out->append(b, sizeof(T));
}

template <typename T>
T GetLE(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::string Dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Writes all of [data, data + n) to fd and into the digest.
absl::Status WriteAll(int fd, const std::string& path, const void* data, size_t n, Sha256* sha) {
  sha->Update(data, n);
  return mt::WriteAll(fd, absl::string_view(static_cast<const char*>(data), n), path);
}

}  // namespace

std::string Sha256Hex(absl::string_view data) {
  Sha256 sha;
  sha.Update(data.data(), data.size());
  const std::string digest = sha.Final();
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(digest.size() * 2);
  for (unsigned char c : digest) {
    hex.push_back(kHex[c >> 4]);
    hex.push_back(kHex[c & 15]);
  }
  return hex;
}

absl::Status WriteIndexCache(const std::string& path, absl::string_view description,
                             absl::Span<const CacheArray> arrays) {
  if (arrays.size() > kMaxArrays) return absl::InvalidArgumentError("too many arrays");
  std::string header(kIndexCacheMagic, sizeof(kIndexCacheMagic));
  PutLE<uint32_t>(&header, kIndexCacheVersion);
  PutLE<uint32_t>(&header, static_cast<uint32_t>(arrays.size()));
  PutLE<uint64_t>(&header, description.size());
  header.append(description.data(), description.size());
  for (const CacheArray& a : arrays) {
    if (a.element_size != 2 && a.element_size != 4 && a.element_size != 8) {
      return absl::InvalidArgumentError(absl::StrCat("element size ", a.element_size));
    }
    PutLE<uint32_t>(&header, a.element_size);
    PutLE<uint32_t>(&header, 0);
    PutLE<uint64_t>(&header, a.count);
  }

  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("creating", tmp, errno);
  absl::Status status = [&]() -> absl::Status {
    Sha256 sha;
    MT_RETURN_IF_ERROR(WriteAll(fd, tmp, header.data(), header.size(), &sha));
    for (const CacheArray& a : arrays) {
      MT_RETURN_IF_ERROR(WriteAll(fd, tmp, a.data, a.count * a.element_size, &sha));
    }
    const std::string digest = sha.Final();
    Sha256 unused;
    MT_RETURN_IF_ERROR(WriteAll(fd, tmp, digest.data(), digest.size(), &unused));
    if (::fchmod(fd, 0644) != 0) return ErrnoStatus("chmod", tmp, errno);
    if (::fsync(fd) != 0) return ErrnoStatus("fsync", tmp, errno);
    return absl::OkStatus();
  }();
  if (::close(fd) != 0 && status.ok()) status = ErrnoStatus("closing", tmp, errno);
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = ErrnoStatus("renaming to", path, errno);
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  return FsyncDirectory(Dirname(path));
}

absl::StatusOr<IndexCacheFile> IndexCacheFile::Read(const std::string& path,
                                                    absl::string_view expected_description) {
  IndexCacheFile file;
  file.path_ = path;
  MT_ASSIGN_OR_RETURN(file.contents_, ReadFile(path, /*max_bytes=*/uint64_t{1} << 40));
  const std::string& c = file.contents_;
  const auto damaged = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("index cache ", path, ": ", why));
  };
  if (c.size() < kFixedHeaderBytes + kDigestBytes) return damaged("truncated");
  if (std::memcmp(c.data(), kIndexCacheMagic, sizeof(kIndexCacheMagic)) != 0) {
    return damaged("bad magic");
  }
  const uint32_t version = GetLE<uint32_t>(c.data() + 8);
  if (version != kIndexCacheVersion) {
    return damaged(absl::StrCat("version ", version, ", expected ", kIndexCacheVersion));
  }
  Sha256 sha;
  sha.Update(c.data(), c.size() - kDigestBytes);
  if (sha.Final() != c.substr(c.size() - kDigestBytes)) return damaged("checksum mismatch");

  const uint32_t num_arrays = GetLE<uint32_t>(c.data() + 12);
  const uint64_t desc_len = GetLE<uint64_t>(c.data() + 16);
  const uint64_t body = c.size() - kDigestBytes;
  if (num_arrays > kMaxArrays || desc_len > body - kFixedHeaderBytes ||
      num_arrays * kArrayEntryBytes > body - kFixedHeaderBytes - desc_len) {
    return damaged("bad header");
  }
  if (absl::string_view(c.data() + kFixedHeaderBytes, desc_len) != expected_description) {
    return damaged("it describes other indices");
  }
  uint64_t pos = kFixedHeaderBytes + desc_len;
  uint64_t offset = pos + uint64_t{num_arrays} * kArrayEntryBytes;
  for (uint32_t i = 0; i < num_arrays; ++i, pos += kArrayEntryBytes) {
    Entry e;
    e.element_size = GetLE<uint32_t>(c.data() + pos);
    e.count = GetLE<uint64_t>(c.data() + pos + 8);
    e.offset = offset;
    if ((e.element_size != 2 && e.element_size != 4 && e.element_size != 8) ||
        e.count > (body - offset) / e.element_size) {
      return damaged(absl::StrCat("array ", i, " does not fit the file"));
    }
    offset += e.count * e.element_size;
    file.arrays_.push_back(e);
  }
  if (offset != body) return damaged("unexpected bytes after the arrays");
  return file;
}

std::string IndexCacheFile::Describe(size_t i, absl::string_view what) const {
  return absl::StrCat("index cache ", path_, ": array ", i, " ", what);
}

absl::StatusOr<CacheLock> CacheLock::Acquire(const std::string& path) {
  const std::string lock_path = path + ".lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("opening", lock_path, errno);
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const int err = errno;
    ::close(fd);
    return ErrnoStatus("locking", lock_path, err);
  }
  return CacheLock(fd);
}

CacheLock& CacheLock::operator=(CacheLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

CacheLock::~CacheLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

absl::Status MakeDirectories(const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(dir, " exists and is not a directory"));
  }
  const std::string parent = Dirname(dir);
  if (parent != dir && parent != "." && parent != "/") MT_RETURN_IF_ERROR(MakeDirectories(parent));
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoStatus("creating directory", dir, errno);
  }
  return absl::OkStatus();
}

}  // namespace mt::data
