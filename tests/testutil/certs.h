// Test certificates made at test time with the openssl command line (never committed): a CA,
// a server certificate for 127.0.0.1/localhost, a client certificate, and a second CA that
// signed nothing of these (for "wrong CA" cases). Thread-compatible.
#ifndef MT_TESTS_TESTUTIL_CERTS_H_
#define MT_TESTS_TESTUTIL_CERTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mt::testutil {

struct TestCerts {
  std::string ca;           // CA certificate (PEM)
  std::string server_cert;  // signed by `ca`, SAN IP:127.0.0.1, DNS:localhost
  std::string server_key;
  std::string client_cert;  // signed by `ca`, clientAuth
  std::string client_key;
  std::string other_ca;  // an unrelated CA
};

// Writes them under `dir` (EC P-256 keys, one day of validity). `extra_server_ips` are added to
// the server certificate's SAN (e.g. a coordinator inside a network namespace). Fails when
// openssl is missing.
absl::StatusOr<TestCerts> MakeTestCerts(const std::string& dir,
                                        const std::vector<std::string>& extra_server_ips = {});

}  // namespace mt::testutil

#endif  // MT_TESTS_TESTUTIL_CERTS_H_
