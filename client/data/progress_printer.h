// The progress of `mtctl data preprocess` on stderr: redrawn in place on a terminal (10 times a
// second at most), a line every 5 seconds otherwise. Thread-compatible (Preprocess reports on
// one thread).
#ifndef MT_CLIENT_DATA_PROGRESS_PRINTER_H_
#define MT_CLIENT_DATA_PROGRESS_PRINTER_H_

#include "common/data/preprocess.h"

namespace mt::client::data_cli {

class ProgressPrinter {
 public:
  // Prints nothing unless `enabled` (--quiet turns it off).
  explicit ProgressPrinter(bool enabled);

  // `final`: the run is over; on a terminal the line is completed, elsewhere the summary
  // on stdout says the rest.
  void Update(const data::PreprocessProgress& p, bool final);

  // Ends a line left open on the terminal, before an error message.
  void BreakLine();

 private:
  const bool enabled_;
  const bool tty_;
  double last_ = 0;
  bool open_line_ = false;
};

}  // namespace mt::client::data_cli

#endif  // MT_CLIENT_DATA_PROGRESS_PRINTER_H_
