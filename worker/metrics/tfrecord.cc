#include "worker/metrics/tfrecord.h"

#include <array>

#include "absl/strings/str_cat.h"

namespace mt::worker::metrics {
namespace {

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = MakeTable();

void PutLittleEndian(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetLittleEndian(absl::string_view in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint64_t>(static_cast<uint8_t>(in[i])) << (8 * i);
  return v;
}

}  // namespace

uint32_t Crc32c(absl::string_view data) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = kTable[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string FrameRecord(absl::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 16);
  PutLittleEndian(payload.size(), 8, &out);
  PutLittleEndian(MaskCrc(Crc32c(out)), 4, &out);
  out.append(payload.data(), payload.size());
  PutLittleEndian(MaskCrc(Crc32c(payload)), 4, &out);
  return out;
}

absl::StatusOr<std::vector<std::string>> ParseRecords(absl::string_view bytes) {
  std::vector<std::string> records;
  size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) {
      return absl::DataLossError(absl::StrCat("record at byte ", at, ": truncated header"));
    }
    const absl::string_view length_bytes = bytes.substr(at, 8);
    const uint64_t length = GetLittleEndian(length_bytes, 8);
    if (GetLittleEndian(bytes.substr(at + 8, 4), 4) != MaskCrc(Crc32c(length_bytes))) {
      return absl::DataLossError(absl::StrCat("record at byte ", at, ": bad length CRC"));
    }
    if (length > bytes.size() - at - 12 || bytes.size() - at - 12 - length < 4) {
      return absl::DataLossError(
          absl::StrCat("record at byte ", at, ": truncated payload of ", length, " bytes"));
    }
    const absl::string_view payload = bytes.substr(at + 12, length);
    if (GetLittleEndian(bytes.substr(at + 12 + length, 4), 4) != MaskCrc(Crc32c(payload))) {
      return absl::DataLossError(absl::StrCat("record at byte ", at, ": bad payload CRC"));
    }
    records.emplace_back(payload);
    at += 16 + length;
  }
  return records;
}

}  // namespace mt::worker::metrics
