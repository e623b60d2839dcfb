#include "tests/testutil/certs.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/status_macros.h"
#include "tests/testutil/subprocess.h"

namespace mt::testutil {
namespace {

const char kOpenssl[] = "/usr/bin/openssl";

absl::Status Openssl(std::vector<std::string> args) {
  args.insert(args.begin(), kOpenssl);
  MT_ASSIGN_OR_RETURN(CommandResult r, RunCommand(args, absl::Seconds(30)));
  if (r.exit_code != 0) {
    return absl::InternalError(absl::StrCat("openssl ", args[1], " failed: ", r.err));
  }
  return absl::OkStatus();
}

absl::Status MakeCa(const std::string& dir, const std::string& name) {
  return Openssl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                  "-days", "1", "-subj", "/CN=" + name, "-keyout", dir + "/" + name + ".key",
                  "-out", dir + "/" + name + ".pem", "-addext", "basicConstraints=critical,CA:TRUE",
                  "-addext", "keyUsage=critical,keyCertSign,cRLSign"});
}

// A key, a request, and the certificate `ca` signs with `extensions`.
absl::Status MakeLeaf(const std::string& dir, const std::string& name, const std::string& ca,
                      const std::string& extensions) {
  const std::string ext = dir + "/" + name + ".ext";
  MT_RETURN_IF_ERROR(WriteFileAtomically(ext, extensions));
  MT_RETURN_IF_ERROR(Openssl({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                              "-nodes", "-subj", "/CN=" + name, "-keyout",
                              dir + "/" + name + ".key", "-out", dir + "/" + name + ".csr"}));
  return Openssl({"x509", "-req", "-in", dir + "/" + name + ".csr", "-CA", dir + "/" + ca + ".pem",
                  "-CAkey", dir + "/" + ca + ".key", "-CAcreateserial", "-days", "1", "-out",
                  dir + "/" + name + ".pem", "-extfile", ext});
}

}  // namespace

absl::StatusOr<TestCerts> MakeTestCerts(const std::string& dir,
                                        const std::vector<std::string>& extra_server_ips) {
  MT_RETURN_IF_ERROR(MakeCa(dir, "ca"));
  MT_RETURN_IF_ERROR(MakeCa(dir, "other-ca"));
  std::string san = "subjectAltName=IP:127.0.0.1,DNS:localhost";
  for (const std::string& ip : extra_server_ips) absl::StrAppend(&san, ",IP:", ip);
  MT_RETURN_IF_ERROR(
      MakeLeaf(dir, "server", "ca", absl::StrCat(san, "\nextendedKeyUsage=serverAuth\n")));
  MT_RETURN_IF_ERROR(MakeLeaf(dir, "client", "ca", "extendedKeyUsage=clientAuth\n"));
  TestCerts c;
  c.ca = dir + "/ca.pem";
  c.server_cert = dir + "/server.pem";
  c.server_key = dir + "/server.key";
  c.client_cert = dir + "/client.pem";
  c.client_key = dir + "/client.key";
  c.other_ca = dir + "/other-ca.pem";
  return c;
}

}  // namespace mt::testutil
