// SPDX-License-Identifier: Apache-2.0
#pragma once
/// A msghdr with room for one descriptor (SCM_RIGHTS), for a request that carries a file.

#include <sys/socket.h>

#include <cstddef>

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
};

}  // namespace iolens::control
