#include "tests/fuzz/fuzz_util.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "common/checkpoint/checkpoint_dir.h"

namespace mt::fuzz {
namespace {

class Scratch {
 public:
  Scratch() {
    std::string base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string tmpl = base + "/mt-fuzz-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mt fuzz: mkdtemp");
      std::abort();
    }
    dir_ = tmpl;
  }
  ~Scratch() { (void)checkpoint::RemoveTree(dir_); }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace

const std::string& ScratchDir() {
  static Scratch* scratch = [] {
    static Scratch s;  // destroyed at exit, removing the directory
    return &s;
  }();
  return scratch->dir();
}

void WriteBytes(const std::string& path, absl::string_view contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "mt fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
}

std::vector<absl::string_view> Split(absl::string_view input, absl::string_view separator,
                                     size_t max_parts) {
  std::vector<absl::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    const size_t at = input.find(separator);
    if (at == absl::string_view::npos) break;
    parts.push_back(input.substr(0, at));
    input.remove_prefix(at + separator.size());
  }
  parts.push_back(input);
  return parts;
}

}  // namespace mt::fuzz
