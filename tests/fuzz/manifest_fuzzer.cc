// Fuzz target: the checkpoint manifest (common/checkpoint/checkpoint_dir): manifest.json read
// from a scratch checkpoint directory, then verified against that directory (its files.path
// entries must never lead outside it) and written back.
#include <sys/stat.h>

#include <cstddef>
#include <cstdint>

#include "common/checkpoint/checkpoint_dir.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = mt::fuzz::ScratchDir() + "/iter_0000001";
  static const bool made = [&] {
    mt::fuzz::WriteBytes(mt::fuzz::ScratchDir() + "/latest_checkpointed_iteration.txt", "1");
    return mkdir(dir.c_str(), 0700) == 0;
  }();
  (void)made;
  mt::fuzz::WriteBytes(dir + "/" + mt::checkpoint::kManifestFile, mt::fuzz::AsView(data, size));
  mt::fuzz::WriteBytes(dir + "/model.safetensors", "");
  auto manifest = mt::checkpoint::ReadManifest(dir);
  if (manifest.ok()) {
    (void)mt::checkpoint::VerifyCheckpointFiles(dir, *manifest);
    (void)mt::checkpoint::ManifestToJson(*manifest);
  }
  (void)mt::checkpoint::ChooseCheckpoint(mt::fuzz::ScratchDir(), /*verify=*/true);
  return 0;
}
