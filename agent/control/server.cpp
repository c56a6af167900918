// SPDX-License-Identifier: Apache-2.0
#include "control/server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <linux/sockios.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "control/closer.hpp"
#include "control/fd_message.hpp"
#include "control/unique_fd.hpp"
#include "core/private_dir.hpp"

namespace iolens::control {

/// One client between accept and close.
struct ServerConnection {
  UniqueFd fd;
  Peer peer;
  std::chrono::steady_clock::time_point deadline;
  bool writing = false;  // false: reading the request
  std::string in;
  std::string out;
  size_t sent = 0;
  bool done = false;
  UniqueFd passed;  // a descriptor sent with the request (SCM_RIGHTS)
  // A descriptor for the client, sent with the answer's first bytes: the daemon's own file (a
  // closed job's record in its output directory), closed here, not through the closer, whose
  // room is kept for the descriptors clients pass.
  UniqueFd reply;
  bool fd_sent = false;
  std::chrono::steady_clock::time_point accepted;
  std::optional<std::size_t> fds_refused_pending;  // read with no descriptors taken: closes then
  std::size_t fds_held_at_refusal = 0;  // and the descriptors requests held then
  // The front thread read this request and left it to the loop (handed), which answers it.
  std::optional<std::string> line;
  bool handed = false;
};

/// The front thread and the requests it leaves to the loop.
struct Server::Front {
  FrontHandler handler;
  UniqueFd wake;  // eventfd: readable while requests wait for the loop (the loop's fd())
  UniqueFd stop;  // eventfd: the thread ends when it is readable
  std::mutex mu;
  std::vector<ServerConnection> handed;  // under mu; at most kMaxHanded
  std::thread thread;
};

namespace {

using Clock = std::chrono::steady_clock;

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

/// Fills `addr` for `path`; false if the path does not fit sun_path (with its NUL).
bool unix_address(const std::string& path, sockaddr_un& addr) {
  addr = {};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) return false;
  std::memcpy(addr.sun_path, path.data(), path.size());
  return true;
}

/// Clears the way for bind(): nothing there, or a socket left by a daemon that died (nobody
/// accepts on it). A live socket or any other file is an error: replacing it would cut off a
/// running daemon or destroy someone's file.
bool remove_stale_socket(int dir_fd, const std::string& name, const std::string& path,
                         const sockaddr_un& addr, std::string& error) {
  struct stat st {};
  if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return true;
    error = errno_text("cannot inspect " + path);
    return false;
  }
  if (!S_ISSOCK(st.st_mode)) {
    error = path + " exists and is not a socket; refusing to replace it";
    return false;
  }
  UniqueFd probe(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (probe.get() < 0) {
    error = errno_text("socket");
    return false;
  }
  // Non-blocking: a live daemon with a full backlog answers EAGAIN, which is not "stale" either.
  if (connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0 ||
      errno != ECONNREFUSED) {
    error = "another process is listening on " + path + " (another iolensd?)";
    return false;
  }
  if (unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT) {
    error = errno_text("cannot remove stale socket " + path);
    return false;
  }
  spdlog::info("control: removed stale socket {}", path);
  return true;
}

/// Sends what the socket takes now; false when the peer is gone.
bool send_some(int fd, const std::string& data, size_t& offset) {
  while (offset < data.size()) {
    const ssize_t n =
        send(fd, data.data() + offset, data.size() - offset, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      offset += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
  }
  return true;
}

/// The first bytes of an answer with `fd` attached (SCM_RIGHTS). Returns the bytes sent, 0 when
/// the socket has no room yet (try again), -1 with errno when it cannot be sent.
ssize_t send_first_with_fd(int sock, const std::string& data, int fd) {
  FdMessage m(const_cast<char*>(data.data()), data.size());
  m.attach(fd);
  for (;;) {
    const ssize_t n = sendmsg(sock, &m.msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0 || errno != EINTR) return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : n;
  }
}

using Connection = ServerConnection;

/// Appends a poll entry for each connection (its request to read, or its answer to send) and
/// returns the earliest of their deadlines and `until`.
Clock::time_point watch(const std::vector<Connection>& conns, std::vector<pollfd>& fds,
                        Clock::time_point until) {
  for (const Connection& c : conns) {
    fds.push_back(pollfd{c.fd.get(), static_cast<short>(c.writing ? POLLOUT : POLLIN), 0});
    until = std::min(until, c.deadline);
  }
  return until;
}

/// What the server's recv() needs beyond the connection: where descriptors go, and whether
/// any may come now.
struct FdPolicy {
  Closer& closer;
  std::atomic<std::size_t>& held;  // descriptors connections hold, not yet handed to the closer
  std::atomic<std::uint64_t>& refused;  // messages whose descriptors the kernel discarded
};

/// recv() that also takes a descriptor sent with the bytes (at most one: more are discarded by
/// the kernel, MSG_CTRUNC). One that arrives after the first goes to the closer: only one per
/// request. When the closer has no room left for every descriptor connections hold plus one,
/// the bytes are read with no control buffer: the kernel then drops what was passed itself
/// (fput at the syscall's exit, which never calls ->flush, so no FUSE server is waited for;
/// docs/control.md#limits), and the request is marked so that a capture can say why.
ssize_t recv_request_bytes(Connection& c, char* buf, size_t size, FdPolicy& fds) {
  FdMessage m(buf, size);
  // `held` first: the loop, dropping one meanwhile, queues it to the closer before it stops
  // counting it, so reading room() second can only see less room, never more.
  const std::size_t held = fds.held.load();
  const bool take = fds.closer.room() > held;
  if (!take) {
    m.msg.msg_control = nullptr;
    m.msg.msg_controllen = 0;
  }
  const ssize_t n = recvmsg(c.fd.get(), &m.msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) return n;
  if (!take) {
    c.fds_refused_pending = fds.closer.pending();
    c.fds_held_at_refusal = fds.held.load();
    if (m.msg.msg_flags & MSG_CTRUNC) ++fds.refused;
    return n;
  }
  m.each_received([&](int fd) {
    if (c.passed.get() < 0) {
      c.passed.reset(fd);
      ++fds.held;
    } else {
      fds.closer.close(fd);
    }
  });
  return n;
}

/// Reads what is there. Sets `line` once a request line is complete (newline, or end of input
/// after some bytes: `printf '{"cmd":"status"}' | socat` sends no newline), or the answer
/// itself when the input is oversize. False when the connection should just be closed.
bool read_request(Connection& c, std::optional<std::string>& line, std::string& early_answer,
                  FdPolicy& fds) {
  char buf[4096];
  for (;;) {
    const ssize_t n = recv_request_bytes(c, buf, sizeof(buf), fds);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n < 0) return false;
    if (n == 0) {
      if (c.in.empty()) return false;  // connected and left: nobody to answer
      line = std::move(c.in);
      return true;
    }
    const size_t old_size = c.in.size();
    c.in.append(buf, static_cast<size_t>(n));
    const size_t nl = c.in.find('\n', old_size);
    if (nl != std::string::npos && nl <= kMaxRequestBytes) {
      c.in.resize(nl);  // anything after the first line is ignored
      line = std::move(c.in);
      return true;
    }
    if (c.in.size() > kMaxRequestBytes) {
      early_answer = error_line(
          kCodeBadRequest, "request longer than " + std::to_string(kMaxRequestBytes) + " bytes");
      return true;
    }
  }
}

/// "uid 1000 is not root or a member of group iolens": who would have been let in.
std::string refusal_text(uid_t uid, uid_t daemon_euid, std::optional<gid_t> group) {
  std::vector<std::string> who{"root"};
  if (daemon_euid != 0) who.push_back("iolensd's user (uid " + std::to_string(daemon_euid) + ")");
  if (group) who.push_back("a member of group " + group_name(*group));
  std::string text = "uid " + std::to_string(uid) + " is not ";
  for (size_t i = 0; i < who.size(); ++i) {
    if (i != 0) text += i + 1 == who.size() ? " or " : ", ";
    text += who[i];
  }
  return text;
}

int poll_timeout_ms(Clock::time_point now, Clock::time_point deadline) {
  if (deadline <= now) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
  return static_cast<int>(std::min<long long>(ms, 60000));
}

}  // namespace

Server::Server(int fd, int dir_fd, std::string path, dev_t dev, ino_t ino,
               std::optional<gid_t> group)
    : fd_(fd),
      dir_fd_(dir_fd),
      path_(std::move(path)),
      name_(path_.substr(path_.rfind('/') + 1)),
      dev_(dev),
      ino_(ino),
      euid_(geteuid()),
      group_(group) {}

std::unique_ptr<Server> Server::listen(const std::string& path, std::optional<gid_t> group,
                                       std::string& error) {
  sockaddr_un addr{};
  if (!unix_address(path, addr)) {
    error = "control socket path must be 1 to " + std::to_string(sizeof(addr.sun_path) - 1) +
            " bytes long: '" + path + "'";
    return nullptr;
  }
  // The socket's directory: checked (a real directory of the daemon's user, writable by nobody
  // else) and used through its descriptor, so nobody can swap the socket's file for a link
  // between the bind and the chown (docs/control.md#who-may-connect).
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash + 1 == path.size()) {
    error = "control socket path must be absolute and name a file: '" + path + "'";
    return nullptr;
  }
  const std::string dir = slash == 0 ? "/" : path.substr(0, slash);
  const std::string name = path.substr(slash + 1);
  UniqueFd dir_fd(core::open_private_dir(dir, 0755, false, "control socket directory", error));
  if (dir_fd.get() < 0 || !remove_stale_socket(dir_fd.get(), name, path, addr, error))
    return nullptr;

  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) {
    error = errno_text("socket");
    return nullptr;
  }
  // Bound inside the checked directory (through its descriptor in /proc when that path fits),
  // and born 0660: bind(2) applies the umask, so no chmod by path follows. The daemon is still
  // single-threaded here; the umask is restored at once.
  sockaddr_un at_dir{};
  if (!unix_address("/proc/self/fd/" + std::to_string(dir_fd.get()) + "/" + name, at_dir))
    at_dir = addr;
  const mode_t old_umask = umask(0117);
  int rc = bind(fd.get(), reinterpret_cast<const sockaddr*>(&at_dir), sizeof(at_dir));
  if (rc != 0 && errno == ENOENT && std::strcmp(at_dir.sun_path, addr.sun_path) != 0)
    rc = bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));  // no /proc
  umask(old_umask);
  if (rc != 0) {
    error = errno_text("cannot bind control socket " + path);
    return nullptr;
  }
  // From here on the file is ours: remove it on every failure. The group is set before
  // listen(), so no client can connect while the file is still open to another group.
  auto fail = [&](const std::string& what) {
    error = errno_text(what);
    unlinkat(dir_fd.get(), name.c_str(), 0);
    return nullptr;
  };
  if (group && fchownat(dir_fd.get(), name.c_str(), static_cast<uid_t>(-1), *group,
                        AT_SYMLINK_NOFOLLOW) != 0) {
    const int e = errno;  // group_name() may change errno
    const std::string gname = group_name(*group);
    errno = e;
    return fail("cannot give " + path + " to group " + gname +
                " (the daemon needs CAP_CHOWN or to be a member of that group)");
  }
  struct stat st {};
  if (fstatat(dir_fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
    return fail("cannot stat " + path);
  if (!S_ISSOCK(st.st_mode)) {
    errno = EEXIST;
    return fail(path + " is not the socket just bound");
  }
  if (::listen(fd.get(), 128) != 0) return fail("cannot listen on " + path);
  const int dfd = dir_fd.release();
  return std::unique_ptr<Server>(new Server(fd.release(), dfd, path, st.st_dev, st.st_ino, group));
}

Server::~Server() {
  if (front_) {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = write(front_->stop.get(), &one, sizeof(one));
    front_->thread.join();
    for (Connection& c : front_->handed) drop_passed(c);
    front_.reset();
  }
  log_refusals(true);
  close(fd_);
  struct stat st {};
  if (fstatat(dir_fd_, name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_dev == dev_ &&
      st.st_ino == ino_) {
    unlinkat(dir_fd_, name_.c_str(), 0);
  }
  close(dir_fd_);
}

bool Server::allowed(int conn_fd, const Peer& peer) const {
  if (access_rule_) return access_rule_(peer);
  if (peer_allowed(peer, euid_, group_, {})) return true;
  // Supplementary groups cost a syscall or a /proc read: only when they can change the answer.
  return group_ && peer_allowed(peer, euid_, group_, peer_groups(conn_fd, peer.pid));
}

void Server::serve_pending(const Handler& handler) {
  serve_pending([&handler](const nlohmann::json& req, RequestContext&) { return handler(req); });
}

bool Server::accept_into(std::vector<Connection>& conns) {
  while (conns.size() < kMaxConnectionsPerServe) {
    UniqueFd conn(accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (conn.get() < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (!accept_failing_) {
        spdlog::warn("control: accept on {}: {}", path_, std::strerror(errno));
        accept_failing_ = true;
      }
      return false;
    }
    accept_failing_ = false;
    std::string why;
    const std::optional<Peer> peer = peer_credentials(conn.get(), why);
    if (!peer || !allowed(conn.get(), *peer)) {
      // Refused before reading anything: a peer that may not ask cannot hold the daemon up.
      std::string text = "peer has no credentials: " + why;
      if (peer) {
        spdlog::warn("control: refused pid {} uid {} gid {} on {}", peer->pid, peer->uid, peer->gid,
                     path_);
        text = refusal_text(peer->uid, euid_, group_);
      } else {
        spdlog::warn("control: refused a peer on {}: {}", path_, why);
      }
      size_t sent = 0;
      send_some(conn.get(), error_line(kCodeDenied, text), sent);  // best effort
      continue;
    }
    Connection c;
    c.fd = std::move(conn);
    c.peer = *peer;
    c.accepted = Clock::now();
    c.deadline = c.accepted + kClientTimeout;
    conns.push_back(std::move(c));
  }
  return true;
}

void Server::drop_passed(Connection& c) {
  if (c.passed.get() < 0) return;
  // To the closer first, then no longer held: the front thread, taking descriptors meanwhile,
  // counts this one twice for a moment, never not at all (it takes one only while the closer
  // has room for every descriptor held, so that a drop never closes one itself).
  closer_.close(c.passed.release());
  --held_fds_;
}

void Server::step(Connection& c, bool ready, const Dispatch& dispatch) {
  if (!c.writing && (ready || c.line)) {
    std::optional<std::string> line;
    std::string answer;
    if (c.line) {
      line = std::move(c.line);
      c.line.reset();
    } else {
      FdPolicy fd_policy{closer_, held_fds_, fds_refused_};
      if (!read_request(c, line, answer, fd_policy)) {
        c.done = true;
        return;
      }
    }
    if (line) {
      answer = dispatch(c, *line);
      if (c.handed) return;  // the loop's now
    }
    if (!answer.empty()) {
      c.in.clear();
      c.in.shrink_to_fit();
      c.out = std::move(answer);
      c.writing = true;
      c.deadline = Clock::now() + kClientTimeout;  // the handler's time is not the client's
    }
  }
  if (c.writing && !c.done && c.reply.get() >= 0) {
    const ssize_t n = send_first_with_fd(c.fd.get(), c.out, c.reply.get());
    if (n > 0) c.sent = static_cast<size_t>(n);
    if (n < 0) {
      // Not sendable (e.g. ETOOMANYREFS: too many descriptors in flight): said instead.
      c.out = error_line(kCodeFailed, std::string("cannot send the descriptor with the "
                                                  "answer: ") + std::strerror(errno));
    }
    // Sent (the client has its own descriptor now) or given up: ours is not needed.
    if (n > 0) c.fd_sent = true;
    if (n != 0) c.reply.reset();
  }
  if (c.writing && !c.done && c.reply.get() < 0) {
    c.done = !send_some(c.fd.get(), c.out, c.sent) || c.sent == c.out.size();
  }
  if (!c.done && Clock::now() >= c.deadline) {
    spdlog::debug("control: pid {} timed out {}", c.peer.pid,
                  c.writing ? "taking its answer" : "sending its request");
    if (!c.writing) {
      size_t sent = 0;
      send_some(c.fd.get(),
                error_line(kCodeBadRequest, "no complete request line within " +
                                                std::to_string(kClientTimeout.count()) + " ms"),
                sent);
    }
    c.done = true;
  }
}

int Server::fd() const { return front_ ? front_->wake.get() : fd_; }

void Server::wake_loop() {
  if (!front_) return;
  const uint64_t one = 1;
  // Fails only when the counter is about to overflow: the loop is woken then anyway.
  [[maybe_unused]] const ssize_t n = write(front_->wake.get(), &one, sizeof(one));
}

bool Server::start_front(FrontHandler front, std::string& error) {
  if (front_) {
    error = "the control socket's front thread is already running";
    return false;
  }
  auto f = std::make_unique<Front>();
  f->handler = std::move(front);
  f->wake.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  f->stop.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (f->wake.get() < 0 || f->stop.get() < 0) {
    error = errno_text("eventfd for the control socket's front thread");
    return false;
  }
  front_ = std::move(f);
  try {
    front_->thread = std::thread([this] { front_loop(); });
  } catch (const std::system_error& e) {
    front_.reset();
    error = std::string("cannot start the control socket's front thread: ") + e.what();
    return false;
  }
  return true;
}

void Server::front_loop() {
  std::vector<Connection> conns;  // being read or answered here
  std::vector<pollfd> fds;
  Clock::time_point accept_again{};  // after an accept() error (EMFILE), not before this
  std::size_t handed_now = 0;  // front_->handed.size() when last looked at, plus those since
  const Dispatch at_front = [&](Connection& c, const std::string& line) {
    bool mine = true;
    std::string answer = answer_line(line, [&](const nlohmann::json& req) -> nlohmann::json {
      std::optional<nlohmann::json> result = front_->handler(req, c.accepted);
      if (!result) {
        mine = false;
        return nlohmann::json();
      }
      return std::move(*result);
    });
    if (!mine && handed_now >= kMaxHanded) {
      // The loop has not taken what it was handed: said at once, so that clients asking the
      // loop cannot pile up, nor take the front thread's room from `status` and `jobs`.
      answer = error_line(kCodeFailed, "the daemon's loop is busy: " +
                                           std::to_string(kMaxHanded) +
                                           " requests wait for it already; try again");
      mine = true;
    }
    if (mine) {
      drop_passed(c);  // answered here: nothing the front answers takes a descriptor
      return answer;
    }
    c.line = line;
    c.handed = true;
    ++handed_now;
    return std::string();
  };
  std::vector<Connection> to_loop, done;
  for (;;) {
    const auto now = Clock::now();
    fds.clear();
    fds.push_back(pollfd{front_->stop.get(), POLLIN, 0});
    // Past kMaxConnectionsPerServe clients in hand, the others wait in the backlog.
    const bool accepting = conns.size() < kMaxConnectionsPerServe && now >= accept_again;
    fds.push_back(pollfd{accepting ? fd_ : -1, POLLIN, 0});
    auto next_deadline = watch(conns, fds, now + kClientTimeout);
    if (!accepting && conns.size() < kMaxConnectionsPerServe)
      next_deadline = std::min(next_deadline, accept_again);
    const bool timed = !conns.empty() || !accepting;
    const int timeout = timed ? poll_timeout_ms(now, next_deadline) : -1;
    if (poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) {
      spdlog::warn("control: front thread: poll: {}", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // never spin on an error
      continue;
    }
    if (fds[0].revents != 0) break;
    {
      std::lock_guard lk(front_->mu);
      handed_now = front_->handed.size();
    }
    try {
      for (size_t i = 0; i < conns.size(); ++i) step(conns[i], fds[i + 2].revents != 0, at_front);
      if ((fds[1].revents & POLLIN) && !accept_into(conns))
        accept_again = Clock::now() + std::chrono::milliseconds(50);
    } catch (const std::exception& e) {
      // answer_line never throws; this is memory running out. The thread must go on: without
      // it nobody is answered.
      spdlog::error("control: front thread: {}", e.what());
    }
    std::erase_if(conns, [&](Connection& c) {
      if (c.handed) {
        c.handed = false;
        to_loop.push_back(std::move(c));
        return true;
      }
      if (!c.done) return false;
      done.push_back(std::move(c));
      return true;
    });
    // Dropped outside the lock the loop takes too (a close the closer has no room for would
    // be done here, and must not hold the loop).
    for (Connection& c : done) drop_passed(c);
    done.clear();
    if (!to_loop.empty()) {
      {
        std::lock_guard lk(front_->mu);
        for (Connection& c : to_loop) front_->handed.push_back(std::move(c));
      }
      to_loop.clear();
      wake_loop();
    }
  }
  for (Connection& c : conns) drop_passed(c);
}

void Server::serve_pending(const ContextHandler& handler) {
  std::vector<Connection> conns;
  if (front_) {
    uint64_t count = 0;
    [[maybe_unused]] const ssize_t n = read(front_->wake.get(), &count, sizeof(count));
    std::lock_guard lk(front_->mu);
    conns.swap(front_->handed);
  } else {
    accept_into(conns);
  }

  const Dispatch in_loop = [&](Connection& c, const std::string& line) {
    spdlog::debug("control: request from pid {} uid {}", c.peer.pid, c.peer.uid);
    const std::string refusal =
        c.passed.get() < 0 && c.fds_refused_pending
            ? "the daemon is not taking descriptors now: " +
                  std::to_string(*c.fds_refused_pending) +
                  " closes pending (a file system that does not answer?)" +
                  (c.fds_held_at_refusal == 0
                       ? std::string()
                       : ", " + std::to_string(c.fds_held_at_refusal) +
                             " held by requests not answered yet") +
                  "; try again later"
            : std::string();
    RequestContext ctx{c.peer, c.passed, refusal, c.reply, reply_fd_allowed(c.peer.uid)};
    const bool had_fd = c.passed.get() >= 0;
    std::string answer =
        answer_line(line, [&](const nlohmann::json& req) { return handler(req, ctx); });
    // Taken by the handler (a capture's output, a run's pipe): no longer the server's to
    // count. Counted until then, 64 kept descriptors stopped the server from taking any.
    if (had_fd && c.passed.get() < 0) --held_fds_;
    drop_passed(c);  // not taken by the handler: to the closer now, not with the connection
    return answer;
  };
  // Requests the front thread read: answered before anything is polled.
  for (Connection& c : conns)
    if (c.line) step(c, false, in_loop);
  std::vector<pollfd> fds;
  while (!conns.empty()) {
    std::erase_if(conns, [&](Connection& c) {
      if (c.done) {
        drop_passed(c);
        // Its client may not have read the descriptor yet: watched until it has.
        if (c.fd_sent) unread_.push_back({std::move(c.fd), c.peer.uid});
      }
      return c.done;
    });
    if (conns.empty()) break;
    const auto now = Clock::now();
    fds.clear();
    const auto next_deadline = watch(conns, fds, now + kClientTimeout);
    if (poll(fds.data(), fds.size(), poll_timeout_ms(now, next_deadline)) < 0 && errno != EINTR) {
      spdlog::warn("control: poll: {}", std::strerror(errno));
      break;  // the connections are closed below; their clients see EOF
    }
    for (size_t i = 0; i < conns.size(); ++i) step(conns[i], fds[i].revents != 0, in_loop);
  }
  for (Connection& c : conns) drop_passed(c);  // the reply descriptor goes with the connection
  log_refusals(false);
}

void Server::prune_unread() {
  std::erase_if(unread_, [](const Unread& u) {
    int queued = 0;
    // What the client has not read yet (AF_UNIX: bytes still charged to our end); a client
    // that closed its end (POLLHUP) took its queue, descriptor included, with it.
    pollfd p{u.fd.get(), 0, 0};
    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR))) return true;
    return ioctl(u.fd.get(), SIOCOUTQ, &queued) != 0 || queued == 0;
  });
}

bool Server::reply_fd_allowed(uid_t uid) {
  prune_unread();
  const auto of_uid = static_cast<std::size_t>(
      std::count_if(unread_.begin(), unread_.end(), [&](const Unread& u) { return u.uid == uid; }));
  return of_uid < kUnreadReplyFdsPerUid && unread_.size() < kUnreadReplyFds;
}

void Server::log_refusals(bool final_line) {
  // Once per 10 s at most: a client that sends descriptors in a loop must not flood the log.
  const auto now = Clock::now();
  if (fds_refused_.load() == 0 ||
      (!final_line && now - refusal_logged_ < std::chrono::seconds(10)))
    return;
  // The front thread may count more meanwhile: taken whole, they are logged next time.
  const std::uint64_t refused = fds_refused_.exchange(0);
  fds_refused_total_ += refused;
  spdlog::warn("control: not taking descriptors: {} closes pending (a file system that does not "
               "answer?); {} requests' descriptors discarded by the kernel ({} since start)",
               closer_.pending(), refused, fds_refused_total_);
  refusal_logged_ = now;
}

}  // namespace iolens::control
