#include "tests/testutil/step_losses.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace mt::testutil {

std::map<int, double> StepLosses(const std::string& log) {
  std::map<int, double> out;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    const size_t at = line.find("step ");
    if (at == absl::string_view::npos) continue;
    absl::string_view rest = line.substr(at + 5);
    const size_t slash = rest.find('/');
    const size_t bar = rest.find(" | loss ");
    if (slash == absl::string_view::npos || bar == absl::string_view::npos) continue;
    int step = 0;
    double loss = 0;
    absl::string_view value = rest.substr(bar + 8);
    value = value.substr(0, value.find(' '));
    if (absl::SimpleAtoi(rest.substr(0, slash), &step) && absl::SimpleAtod(value, &loss)) {
      out[step] = loss;
    }
  }
  return out;
}

}  // namespace mt::testutil
