// mtctl: the command-line client of mt. `mtctl --help` lists the verbs, `mtctl VERB --help`
// explains one.
#include "client/verbs.h"

int main(int argc, char** argv) { return mt::client::Main(argc, argv); }
