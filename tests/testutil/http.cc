#include "tests/testutil/http.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace mt::testutil {
namespace {

// Waits until `fd` is ready for `events` or the deadline passes.
bool WaitReady(int fd, short events, absl::Time deadline) {
  while (true) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(ms));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

}  // namespace

std::string UrlEncode(absl::string_view value) {
  std::string out;
  for (unsigned char c : value) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

absl::StatusOr<HttpResult> HttpGet(const std::string& host_port, const std::string& target,
                                   absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("'", host_port, "' is not host:port"));
  }
  const std::string host = host_port.substr(0, colon);
  const std::string port = host_port.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int e = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); e != 0) {
    return absl::UnavailableError(absl::StrCat(host_port, ": ", ::gai_strerror(e)));
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("connect ", host_port, ": ", std::strerror(errno)));
  }
  const std::string request = absl::StrCat("GET ", target, " HTTP/1.0\r\nHost: ", host_port,
                                           "\r\nAccept: */*\r\nConnection: close\r\n\r\n");
  size_t sent = 0;
  while (sent < request.size()) {
    if (!WaitReady(fd, POLLOUT, deadline)) {
      ::close(fd);
      return absl::DeadlineExceededError(absl::StrCat("GET ", host_port, target, ": timed out"));
    }
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EINTR) {
      ::close(fd);
      return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    }
    if (n > 0) sent += static_cast<size_t>(n);
  }
  std::string raw;
  char buf[65536];
  while (true) {
    if (!WaitReady(fd, POLLIN, deadline)) {
      ::close(fd);
      return absl::DeadlineExceededError(absl::StrCat("GET ", host_port, target, ": timed out"));
    }
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
    }
    raw.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  const size_t end = raw.find("\r\n\r\n");
  if (end == std::string::npos) return absl::DataLossError("no HTTP header in the response");
  HttpResult result;
  result.body = raw.substr(end + 4);
  std::vector<absl::string_view> lines =
      absl::StrSplit(absl::string_view(raw).substr(0, end), "\r\n");
  std::vector<absl::string_view> status_line = absl::StrSplit(lines[0], ' ');
  if (status_line.size() < 2 || !absl::SimpleAtoi(status_line[1], &result.status)) {
    return absl::DataLossError(absl::StrCat("bad status line: ", lines[0]));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t c = lines[i].find(':');
    if (c == absl::string_view::npos) continue;
    if (absl::EqualsIgnoreCase(lines[i].substr(0, c), "content-type")) {
      result.content_type = std::string(absl::StripAsciiWhitespace(lines[i].substr(c + 1)));
    }
  }
  return result;
}

}  // namespace mt::testutil
