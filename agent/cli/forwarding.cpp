// SPDX-License-Identifier: Apache-2.0
#include "cli/forwarding.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <initializer_list>

namespace iolens::cli {
namespace {

volatile sig_atomic_t g_child = -1;

void forward_signal(int sig, siginfo_t* info, void*) {
  if (g_child > 0 && (info == nullptr || info->si_code != SI_KERNEL)) kill(g_child, sig);
}

}  // namespace

void install_forwarding() {
  // An inherited SIG_IGN for SIGCHLD would make the kernel reap the command itself, and its exit
  // status would be lost.
  signal(SIGCHLD, SIG_DFL);
  struct sigaction sa {};
  sa.sa_sigaction = forward_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaction(s, &sa, nullptr);
}

void set_forwarded_child(pid_t pid) { g_child = pid; }

bool wait_forwarded_child(pid_t pid, int& wait_status) {
  siginfo_t si{};
  // Waited for without reaping (WNOWAIT): its pid stays its own until the reap below.
  while (waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOWAIT) != 0)
    if (errno != EINTR) return false;
  sigset_t hold, old;
  sigemptyset(&hold);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&hold, sig);
  sigprocmask(SIG_BLOCK, &hold, &old);
  const pid_t r = waitpid(pid, &wait_status, 0);
  const int e = errno;
  if (r == pid) g_child = -1;
  sigprocmask(SIG_SETMASK, &old, nullptr);
  errno = e;
  return r == pid;
}

}  // namespace iolens::cli
