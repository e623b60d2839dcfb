#include "common/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/errors.h"
#include "common/base/json.h"
#include "common/base/status_macros.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace mt::checkpoint {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr uint64_t kDataAlignment = 64;

void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

absl::Status DataLoss(const std::string& what) {
  return absl::DataLossError(absl::StrCat("safetensors: ", what));
}

// A JSON number that must be a non-negative integer.
absl::StatusOr<uint64_t> AsCount(const google::protobuf::Value& v, absl::string_view what) {
  if (v.kind_case() != google::protobuf::Value::kNumberValue || v.number_value() < 0 ||
      v.number_value() != std::floor(v.number_value()) || v.number_value() > 9.0e15) {
    return DataLoss(absl::StrCat(what, " is not a non-negative integer"));
  }
  return static_cast<uint64_t>(v.number_value());
}

absl::Status PRead(int fd, const std::string& path, void* dst, size_t size, uint64_t offset) {
  char* p = static_cast<char*>(dst);
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd, p + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("reading", path, errno);
    if (n == 0) return DataLoss(absl::StrCat(path, " ends early"));
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

TensorView ViewOf(const std::string& name, const HostTensor& t) {
  TensorView v;
  v.name = name;
  v.dtype = t.dtype;
  v.shape = t.shape;
  v.data = t.data.data();
  v.nbytes = t.data.size();
  return v;
}

absl::StatusOr<FileDigest> WriteSafetensors(const std::string& path,
                                            const std::vector<TensorView>& tensors,
                                            const std::map<std::string, std::string>& metadata) {
  std::string header = "{";
  bool first = true;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (const auto& [k, v] : metadata) {
      if (!first) header += ",";
      first = false;
      absl::StrAppend(&header, JsonQuote(k), ":", JsonQuote(v));
    }
    header += "}";
    first = false;
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const TensorView& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensor name \"", t.name, "\" is empty, reserved or repeated"));
    }
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    if (static_cast<uint64_t>(numel) * DTypeSize(t.dtype) != t.nbytes) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: ", t.name, " has ", t.nbytes,
                                                     " bytes for ", DTypeName(t.dtype),
                                                     ShapeString(t.shape)));
    }
    if (!first) header += ",";
    first = false;
    absl::StrAppend(&header, JsonQuote(t.name), ":{\"dtype\":\"", DTypeName(t.dtype),
                    "\",\"shape\":[");
    for (size_t i = 0; i < t.shape.size(); ++i) {
      absl::StrAppend(&header, i ? "," : "", t.shape[i]);
    }
    absl::StrAppend(&header, "],\"data_offsets\":[", offset, ",", offset + t.nbytes, "]}");
    offset += t.nbytes;
  }
  header += "}";
  while ((8 + header.size()) % kDataAlignment != 0) header.push_back(' ');
  std::string prefix;
  PutU64(&prefix, header.size());
  MT_ASSIGN_OR_RETURN(std::unique_ptr<AtomicFileWriter> w, AtomicFileWriter::Create(path));
  MT_RETURN_IF_ERROR(w->Append(prefix));
  MT_RETURN_IF_ERROR(w->Append(header));
  for (const TensorView& t : tensors) MT_RETURN_IF_ERROR(w->Append(t.data, t.nbytes));
  return w->Commit();
}

const SafetensorsEntry* SafetensorsIndex::Find(const std::string& name) const {
  for (const SafetensorsEntry& e : tensors) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

absl::StatusOr<SafetensorsIndex> ParseSafetensorsHeader(absl::string_view header,
                                                        uint64_t file_size) {
  google::protobuf::Struct root;
  google::protobuf::util::JsonParseOptions options;
  auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(header.data(), header.size()), &root, options);
  if (!parsed.ok()) {
    // The parser's message quotes the input: never echo a file's bytes (it may not be one).
    return DataLoss("the header is not a JSON object");
  }
  SafetensorsIndex index;
  index.data_start = 8 + header.size();
  index.file_size = file_size;
  if (file_size < index.data_start) return DataLoss("the file ends inside its header");
  const uint64_t data_size = file_size - index.data_start;
  for (const auto& [name, value] : root.fields()) {
    if (name == "__metadata__") {
      if (value.kind_case() != google::protobuf::Value::kStructValue) {
        return DataLoss("__metadata__ is not an object");
      }
      for (const auto& [k, v] : value.struct_value().fields()) {
        if (v.kind_case() != google::protobuf::Value::kStringValue) {
          return DataLoss(absl::StrCat("__metadata__.", k, " is not a string"));
        }
        index.metadata[k] = v.string_value();
      }
      continue;
    }
    if (value.kind_case() != google::protobuf::Value::kStructValue) {
      return DataLoss(absl::StrCat("entry \"", name, "\" is not an object"));
    }
    const auto& f = value.struct_value().fields();
    auto dtype_it = f.find("dtype");
    auto shape_it = f.find("shape");
    auto off_it = f.find("data_offsets");
    if (dtype_it == f.end() || shape_it == f.end() || off_it == f.end() ||
        dtype_it->second.kind_case() != google::protobuf::Value::kStringValue ||
        shape_it->second.kind_case() != google::protobuf::Value::kListValue ||
        off_it->second.kind_case() != google::protobuf::Value::kListValue ||
        off_it->second.list_value().values_size() != 2) {
      return DataLoss(absl::StrCat("entry \"", name, "\" lacks dtype, shape or data_offsets"));
    }
    SafetensorsEntry e;
    e.name = name;
    auto dtype = ParseDType(dtype_it->second.string_value());
    if (!dtype.ok()) return DataLoss(absl::StrCat(name, ": ", dtype.status().message()));
    e.dtype = *dtype;
    uint64_t numel = 1;
    for (const auto& d : shape_it->second.list_value().values()) {
      MT_ASSIGN_OR_RETURN(uint64_t dim, AsCount(d, absl::StrCat(name, ".shape")));
      if (dim > 0 && numel > (uint64_t{1} << 50) / dim) return DataLoss(name + ": shape too large");
      numel *= dim;
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    MT_ASSIGN_OR_RETURN(e.begin, AsCount(off_it->second.list_value().values(0), name));
    MT_ASSIGN_OR_RETURN(e.end, AsCount(off_it->second.list_value().values(1), name));
    if (e.end < e.begin || e.end > data_size || e.end - e.begin != numel * DTypeSize(e.dtype)) {
      return DataLoss(absl::StrCat(name, ": data_offsets [", e.begin, ", ", e.end, ") do not fit ",
                                   DTypeName(e.dtype), ShapeString(e.shape), " in ", data_size,
                                   " bytes of data"));
    }
    index.tensors.push_back(std::move(e));
  }
  std::sort(index.tensors.begin(), index.tensors.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  uint64_t at = 0;
  for (const SafetensorsEntry& e : index.tensors) {
    if (e.begin != at) {
      return DataLoss(absl::StrCat("tensor ", e.name, " starts at ", e.begin, ", expected ", at,
                                   " (holes or overlaps)"));
    }
    at = e.end;
  }
  if (at != data_size) {
    return DataLoss(absl::StrCat("the tensors cover ", at, " of ", data_size, " data bytes"));
  }
  return index;
}

namespace {

// The header length of a file that is `size` bytes long, from its first 8 bytes.
absl::StatusOr<uint64_t> HeaderLength(const unsigned char* len_bytes, uint64_t size,
                                      const std::string& path) {
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | len_bytes[i];
  if (len > kMaxHeaderBytes || len > size - 8) {
    // The length itself is the file's first bytes: not echoed (a file that is no safetensors
    // must not leak through the error).
    return DataLoss(absl::StrCat(path,
                                 ": the header length (first 8 bytes) does not fit the file (",
                                 size, " bytes); not a safetensors file?"));
  }
  return len;
}

}  // namespace

absl::StatusOr<SafetensorsIndex> ReadSafetensorsIndex(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("opening", path, errno);
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus("stat", path, errno);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) return DataLoss(absl::StrCat(path, " is ", size, " bytes, too short"));
  unsigned char len_bytes[8];
  MT_RETURN_IF_ERROR(PRead(fd, path, len_bytes, 8, 0));
  MT_ASSIGN_OR_RETURN(const uint64_t len, HeaderLength(len_bytes, size, path));
  std::string header(len, '\0');
  MT_RETURN_IF_ERROR(PRead(fd, path, header.data(), len, 8));
  auto index = ParseSafetensorsHeader(header, size);
  if (!index.ok()) return absl::DataLossError(absl::StrCat(path, ": ", index.status().message()));
  return index;
}

absl::StatusOr<SafetensorsIndex> ParseSafetensorsFile(absl::string_view file) {
  if (file.size() < 8) return DataLoss(absl::StrCat("a file of ", file.size(), " bytes"));
  MT_ASSIGN_OR_RETURN(
      const uint64_t len,
      HeaderLength(reinterpret_cast<const unsigned char*>(file.data()), file.size(), "file"));
  return ParseSafetensorsHeader(file.substr(8, len), file.size());
}

HostTensor SafetensorsTensorFromMemory(absl::string_view file, const SafetensorsIndex& index,
                                       const SafetensorsEntry& entry) {
  HostTensor t;
  t.dtype = entry.dtype;
  t.shape = entry.shape;
  t.data.assign(file.data() + index.data_start + entry.begin, entry.end - entry.begin);
  return t;
}

absl::Status ReadSafetensorsInto(const std::string& path, const SafetensorsIndex& index,
                                 const SafetensorsEntry& entry, void* dst, size_t size) {
  if (size != entry.end - entry.begin) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", entry.name, " has ",
                                                   entry.end - entry.begin, " bytes, not ", size));
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("opening", path, errno);
  absl::Status s = PRead(fd, path, dst, size, index.data_start + entry.begin);
  ::close(fd);
  return s;
}

absl::StatusOr<HostTensor> ReadSafetensorsTensor(const std::string& path,
                                                 const SafetensorsIndex& index,
                                                 const SafetensorsEntry& entry) {
  HostTensor t;
  t.dtype = entry.dtype;
  t.shape = entry.shape;
  t.data.resize(entry.end - entry.begin);
  MT_RETURN_IF_ERROR(ReadSafetensorsInto(path, index, entry, t.data.data(), t.data.size()));
  return t;
}

}  // namespace mt::checkpoint
