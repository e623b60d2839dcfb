// TFRecord framing, the container of TensorBoard event files (FORMAT.md beside this file):
//
//   u64 little-endian  length of the payload
//   u32 little-endian  masked CRC-32C of those 8 length bytes
//   length bytes       payload (here: a serialized mt.tensorboard.Event)
//   u32 little-endian  masked CRC-32C of the payload
//
// masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2^32), CRC-32C being the
// Castagnoli polynomial (reflected 0x82F63B78), initial value and final xor 0xFFFFFFFF.
// Thread-safe free functions.
#ifndef MT_WORKER_METRICS_TFRECORD_H_
#define MT_WORKER_METRICS_TFRECORD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt::worker::metrics {

// CRC-32C of `data` (crc32c("123456789") == 0xE3069283).
uint32_t Crc32c(absl::string_view data);
uint32_t MaskCrc(uint32_t crc);

// One framed record around `payload`.
std::string FrameRecord(absl::string_view payload);

// Splits `bytes` into record payloads, checking both CRCs of every record. DataLoss naming the
// record's offset for a bad CRC or a truncated record.
absl::StatusOr<std::vector<std::string>> ParseRecords(absl::string_view bytes);

}  // namespace mt::worker::metrics

#endif  // MT_WORKER_METRICS_TFRECORD_H_
