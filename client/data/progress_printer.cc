#include "client/data/progress_printer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/format.h"

namespace mt::client::data_cli {

ProgressPrinter::ProgressPrinter(bool enabled)
    : enabled_(enabled), tty_(::isatty(STDERR_FILENO) == 1) {}

void ProgressPrinter::Update(const data::PreprocessProgress& p, bool final) {
  if (!enabled_) return;
  const double interval = tty_ ? 0.1 : 5.0;
  if (!final && p.seconds - last_ < interval) return;
  if (final && !tty_) return;  // the summary follows
  last_ = p.seconds;
  const double s = std::max(p.seconds, 1e-9);
  std::string line;
  if (p.total_bytes > 0) {
    const double frac = std::min(1.0, static_cast<double>(p.bytes_done) / p.total_bytes);
    if (tty_) absl::StrAppend(&line, Bar(frac, 24), " ");
    absl::StrAppend(&line, absl::StrFormat("%3.0f%%  ", frac * 100), DecimalBytes(p.bytes_done),
                    "/", DecimalBytes(p.total_bytes), "  ");
  } else {
    absl::StrAppend(&line, DecimalBytes(p.bytes_done), "  ");
  }
  absl::StrAppend(&line, Thousands(p.documents), " docs  ", ScaledCount(p.documents / s, "k"),
                  " docs/s  ", absl::StrFormat("%.1f", p.bytes_done / s / 1e6), " MB/s  ",
                  ScaledCount(p.tokens / s, "k"), " tokens/s");
  if (p.bad_lines > 0) absl::StrAppend(&line, "  ", Thousands(p.bad_lines), " bad");
  if (final) {
    absl::StrAppend(&line, "  done in ", ClockDuration(p.seconds));
  } else if (p.total_bytes > 0 && p.bytes_done > 0) {
    absl::StrAppend(&line, "  ETA ",
                    ClockDuration((p.total_bytes - p.bytes_done) / (p.bytes_done / s)));
  }
  if (tty_) {
    std::fprintf(stderr, "\r%s\x1b[K%s", line.c_str(), final ? "\n" : "");
    open_line_ = !final;
  } else {
    std::fprintf(stderr, "preprocess: %s\n", line.c_str());
  }
  std::fflush(stderr);
}

void ProgressPrinter::BreakLine() {
  if (open_line_) std::fputc('\n', stderr);
  open_line_ = false;
}

}  // namespace mt::client::data_cli
