// SPDX-License-Identifier: Apache-2.0
#include "control/client.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "control/fd_message.hpp"
#include "control/protocol.hpp"
#include "control/unique_fd.hpp"

namespace iolens::control {
namespace {

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<long long>(left, 0));
}

}  // namespace

std::string connect_error(const std::string& path, int err) {
  std::string text = "cannot connect to iolensd at " + path + ": " + std::strerror(err);
  if (err == EACCES || err == EPERM) {
    return text + " (needs root, iolensd's user or a member of iolensd's group)";
  }
  return text + " (is iolensd running?)";
}

namespace {

/// Waits for `events` on `fd` until `deadline`; false on timeout.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, ms_left(deadline));
    if (n > 0) return true;
    if (n == 0 || errno != EINTR) return false;
  }
}

/// The first bytes of a request, with `pass_fd` attached (SCM_RIGHTS): the kernel gives the
/// daemon its own descriptor of the same open file.
ssize_t send_with_fd(int sock, const std::string& bytes, int pass_fd) {
  FdMessage m(const_cast<char*>(bytes.data()), bytes.size());
  m.attach(pass_fd);
  return sendmsg(sock, &m.msg, MSG_NOSIGNAL);
}

/// recv() that also takes a descriptor sent with the answer (SCM_RIGHTS): the first is kept
/// in `received` when the caller wants one (`received` not null), every other one is closed.
ssize_t recv_answer_bytes(int sock, char* buf, size_t size, int* received) {
  FdMessage m(buf, size);
  const ssize_t n = recvmsg(sock, &m.msg, MSG_CMSG_CLOEXEC);
  if (n < 0) return n;
  m.each_received([&](int fd) {
    if (received && *received < 0)
      *received = fd;
    else
      close(fd);
  });
  return n;
}

}  // namespace

std::optional<nlohmann::json> request(const std::string& socket_path, const nlohmann::json& req,
                                      std::string& error, int timeout_ms, int pass_fd,
                                      int* received_fd, Answer* refusal) {
  const int timeout = std::max(timeout_ms, 1);
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout);
  const std::string timeout_text =
      "iolensd at " + socket_path + " did not answer within " + std::to_string(timeout) + " ms";
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(addr.sun_path)) {
    error = "socket path must be 1 to " + std::to_string(sizeof(addr.sun_path) - 1) +
            " bytes long: '" + socket_path + "'";
    return std::nullopt;
  }
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());

  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) {
    error = std::string("socket: ") + std::strerror(errno);
    return std::nullopt;
  }
  // A blocking connect: a unix socket with a full backlog makes a non-blocking one fail with
  // EAGAIN at once, while a blocking one waits for room up to SO_SNDTIMEO.
  timeval tv{timeout / 1000, static_cast<suseconds_t>(timeout % 1000) * 1000};
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  int rc;
  do {
    rc = connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  } while (rc != 0 && errno == EINTR && ms_left(deadline) > 0);
  if (rc != 0 && errno != EISCONN) {  // EISCONN: an interrupted connect completed meanwhile
    error = errno == EAGAIN ? timeout_text : connect_error(socket_path, errno);
    return std::nullopt;
  }
  fcntl(fd.get(), F_SETFL, fcntl(fd.get(), F_GETFL) | O_NONBLOCK);

  // A daemon that refuses us, or finds the request too long, answers and closes without reading
  // everything: a failed send is not the end, the answer may be waiting.
  const std::string line = request_line(req);
  size_t sent = 0;
  while (sent < line.size()) {
    const ssize_t n = sent == 0 && pass_fd >= 0
                          ? send_with_fd(fd.get(), line, pass_fd)
                          : send(fd.get(), line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd.get(), POLLOUT, deadline)) {
        error = timeout_text;
        return std::nullopt;
      }
    } else {
      break;
    }
  }

  std::string answer;
  bool complete = false;
  char buf[65536];
  while (!complete) {
    const ssize_t n = recv_answer_bytes(fd.get(), buf, sizeof(buf), received_fd);
    if (n > 0) {
      const size_t old_size = answer.size();
      answer.append(buf, static_cast<size_t>(n));
      if (const size_t nl = answer.find('\n', old_size); nl != std::string::npos) {
        answer.resize(nl);
        complete = true;
      } else if (answer.size() > kMaxAnswerBytes) {
        error = "answer from iolensd at " + socket_path + " is larger than " +
                std::to_string(kMaxAnswerBytes >> 20) + " MiB";
        return std::nullopt;
      }
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd.get(), POLLIN, deadline)) {
        error = timeout_text;
        return std::nullopt;
      }
    } else {
      // End of input (or a reset after the daemon closed): what came is all there is.
      if (answer.empty()) {
        error = "iolensd at " + socket_path + " closed the connection without an answer";
        return std::nullopt;
      }
      complete = true;
    }
  }

  Answer a = parse_answer(answer);
  if (a.result) return std::move(a.result);
  if (refusal && !a.malformed) *refusal = a;
  if (a.malformed) {
    error = "malformed answer from iolensd at " + socket_path + ": " + a.error;
  } else if (a.code == kCodeDenied) {
    error = "permission denied by iolensd: " + a.error;
  } else {
    error = "iolensd: " + a.error;
  }
  return std::nullopt;
}

}  // namespace iolens::control
