// SPDX-License-Identifier: Apache-2.0
#pragma once
/// A msghdr with room for one descriptor (SCM_RIGHTS), for a request or an answer that
/// carries a file.

#include <sys/socket.h>

#include <cstddef>
#include <cstring>

namespace iolens::control {

struct FdMessage {
  iovec iov;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  FdMessage(void* data, std::size_t size) : iov{data, size} {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
  }
  FdMessage(const FdMessage&) = delete;  // msg points into itself
  FdMessage& operator=(const FdMessage&) = delete;

  /// Attaches `fd` to the message to send: the receiver gets its own descriptor of the file.
  void attach(int fd) {
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &fd, sizeof(int));
  }
  /// Calls `take(fd)` for each descriptor a received message carried; `take` owns it.
  template <typename Take>
  void each_received(Take&& take) {
    for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm != nullptr; cm = CMSG_NXTHDR(&msg, cm)) {
      if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
          cm->cmsg_len < CMSG_LEN(sizeof(int)))
        continue;
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(cm), sizeof(int));
      take(fd);
    }
  }
};

}  // namespace iolens::control
