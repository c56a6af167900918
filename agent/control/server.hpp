// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The daemon's end of the control socket: a unix stream socket the daemon polls with the rest of
/// its work. Answers are computed inline by the daemon's handler, or, once start_front() has
/// run, by a front thread for the requests that must never wait for the daemon's loop (`status`,
/// `jobs`: docs/control.md#answer-times); the Closer's thread closes the descriptors passed with
/// requests and not kept.

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "control/closer.hpp"
#include "control/peer.hpp"
#include "control/protocol.hpp"
#include "control/unique_fd.hpp"

namespace iolens::control {

/// How long one client may take to send its request (and again to take its answer). Clients are
/// served together, so one stuck client delays the others by at most this.
inline constexpr std::chrono::milliseconds kClientTimeout{2000};

/// Connections handled by one serve_pending(), or held by the front thread at once; more stay
/// queued in the listen backlog. Bounds the memory a burst of clients can pin (each may buffer
/// up to kMaxRequestBytes).
inline constexpr std::size_t kMaxConnectionsPerServe = 64;

/// With the front thread: requests handed to the loop and not yet taken, at most. Past it a
/// request for the loop is answered at once with the error `failed`, "the daemon's loop is
/// busy: ...": a loop that is busy for long, and clients that keep asking it, can neither make
/// the daemon hold more connections nor take the front thread's room from `status` and `jobs`.
inline constexpr std::size_t kMaxHanded = 64;

/// Answers with a descriptor whose client has not read them, at most, per peer uid and in all.
/// A descriptor in flight is charged to the daemon's user (root's count of descriptors in
/// flight is bounded by RLIMIT_NOFILE, past which sendmsg fails with ETOOMANYREFS for every
/// root process without CAP_SYS_RESOURCE): a client that asks and never reads must not pile
/// them up. The server keeps such a connection open until its client has read the answer or
/// gone, and hands no more descriptors to that uid past the bound (docs/control.md#limits).
inline constexpr std::size_t kUnreadReplyFdsPerUid = 8;
inline constexpr std::size_t kUnreadReplyFds = 64;

/// What a handler may know about the request beyond its JSON.
struct RequestContext {
  const Peer& peer;
  /// The descriptor the client sent with its request (SCM_RIGHTS), -1 if none. A handler that
  /// keeps it takes it (release()); otherwise the server's Closer closes it, off the loop.
  UniqueFd& passed_fd;
  /// Why passed_fd is -1 although the client may have sent one, or empty: the server took no
  /// descriptors while the request came in ("the daemon is not taking descriptors now: ...").
  const std::string& fd_refusal;
  /// A descriptor the handler gives the client with its answer (SCM_RIGHTS, with the answer's
  /// first bytes), e.g. a closed job's record, which the client reads itself. The server closes
  /// its copy once sent, or with the connection.
  UniqueFd& reply_fd;
  /// False when this peer's uid (or all peers) already has kUnreadReplyFds(PerUid) answers
  /// with a descriptor not read yet: the handler must not set reply_fd then.
  bool reply_fd_allowed;
};

/// One client between accept and close (server.cpp).
struct ServerConnection;

class Server {
 public:
  using Handler = control::Handler;
  using ContextHandler =
      std::function<nlohmann::json(const nlohmann::json& request, RequestContext& ctx)>;
  /// Whether a peer may ask. The default: peer_allowed() with the daemon's euid and `group`.
  using AccessRule = std::function<bool(const Peer&)>;
  /// The front thread's handler: the answer's "result", or std::nullopt to leave the request to
  /// the loop. Throw as a Handler does for an error answer. `arrived`: when the connection was
  /// accepted (an answer built since then is as fresh as the client can ask for).
  using FrontHandler = std::function<std::optional<nlohmann::json>(
      const nlohmann::json& request, std::chrono::steady_clock::time_point arrived)>;

  /// Creates the parent directory (0755) if missing and refuses one that is a symbolic link, not
  /// owned by the daemon's user or writable by others (core::open_private_dir); removes a stale
  /// socket file (only if it is a socket nobody listens on; anything else at the path is an
  /// error); binds inside that directory with mode 0660 (umask), chgrp `group` when given
  /// (through the directory's descriptor, never following a link), listens. nullptr and
  /// `error` on failure.
  static std::unique_ptr<Server> listen(const std::string& path, std::optional<gid_t> group,
                                        std::string& error);

  /// What the loop polls for POLLIN before calling serve_pending(): the listening socket, or
  /// once the front thread runs, an eventfd it makes readable when it hands a request over (or
  /// wake_loop() is called).
  int fd() const;
  const std::string& path() const { return path_; }

  /// Starts the front thread. From then on it accepts, checks each peer and reads each request;
  /// a request `front` answers it answers itself, so a loop busy with a long piece of work never
  /// holds it up; the others it hands to the loop, which answers them in serve_pending(). Call
  /// once, before the first serve_pending(). False and `error` when the thread cannot start:
  /// the server then goes on serving everything in serve_pending().
  bool start_front(FrontHandler front, std::string& error);
  /// Makes fd() readable: the front handler asking the loop for something (a fresh answer).
  void wake_loop();

  /// Accepts the pending connections (or, with the front thread, takes the requests it handed
  /// over) and answers each: one request line, SO_PEERCRED checked first (a refused peer gets an
  /// error answer and a warning in the log), `handler`, one answer line, close. Returns when
  /// every client taken is answered or timed out (kClientTimeout).
  void serve_pending(const Handler& handler);
  /// The same, for handlers that need the peer or a passed descriptor.
  void serve_pending(const ContextHandler& handler);

  /// Replaces the default access rule. For tests: a refusal can be seen without a second user.
  void override_access_rule(AccessRule rule) { access_rule_ = std::move(rule); }

  /// Closes the socket and removes its file (unless another process has replaced it since).
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

 private:
  Server(int fd, int dir_fd, std::string path, dev_t dev, ino_t ino, std::optional<gid_t> group);
  bool allowed(int conn_fd, const Peer& peer) const;
  /// Accepts connections until none is pending or `conns` holds kMaxConnectionsPerServe. False
  /// when accept() failed for another reason than none pending (EMFILE: the socket stays
  /// readable, so the caller waits before it tries again).
  bool accept_into(std::vector<ServerConnection>& conns);
  /// The answer to a request line: computed (and returned), or handed over (returns empty and
  /// sets the connection's `handed`).
  using Dispatch = std::function<std::string(ServerConnection& c, const std::string& line)>;
  /// One step of a connection: reads its request if `ready`, answers it with `dispatch`, sends.
  void step(ServerConnection& c, bool ready, const Dispatch& dispatch);
  /// A descriptor passed with a request and not taken: to the closer, never close(2) here.
  void drop_passed(ServerConnection& c);
  void front_loop();

  int fd_;
  int dir_fd_;  // the socket's checked directory
  std::string path_;
  std::string name_;  // the socket's name in dir_fd_
  dev_t dev_;  // the socket file we created, to unlink only that one
  ino_t ino_;
  uid_t euid_;
  std::optional<gid_t> group_;
  AccessRule access_rule_;
  bool accept_failing_ = false;  // accept() errors (EMFILE) are logged once, not every poll
  // Both touched by the front thread (reading requests) and the loop (answering them).
  std::atomic<std::size_t> held_fds_{0};  // descriptors connections hold, not yet given to closer_
  std::atomic<std::uint64_t> fds_refused_{0};  // messages whose descriptors were not taken, since the log
  std::uint64_t fds_refused_total_ = 0;
  std::chrono::steady_clock::time_point refusal_logged_{};
  void log_refusals(bool final_line);
  /// Connections whose answer carried a descriptor and whose client has not read it yet.
  struct Unread {
    UniqueFd fd;
    uid_t uid;
  };
  std::vector<Unread> unread_;
  /// Drops the connections whose client has read its answer (or is gone).
  void prune_unread();
  bool reply_fd_allowed(uid_t uid);
  struct Front;  // the front thread and what it hands the loop (server.cpp)
  std::unique_ptr<Front> front_;
  // Declared last: destroyed first, after ~Server, waiting a bounded time (kCloserStopWait).
  Closer closer_;
};

}  // namespace iolens::control
