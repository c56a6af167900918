// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Signals sent to `iolens run` go on to its command, whichever programs count it.

#include <sys/types.h>

namespace iolens::cli {

/// Forwards SIGINT/SIGTERM/SIGHUP/SIGQUIT sent to iolens by a process (kill, systemd, a
/// scheduler) to the forwarded child. Signals from the terminal (si_code SI_KERNEL) already
/// reached the command through its process group; forwarding them too would deliver them twice.
void install_forwarding();

/// The process signals go to; -1: none (after it was reaped, so none reaches a reused pid).
void set_forwarded_child(pid_t pid);

/// Blocks until `pid` exits, then reaps it with the forwarded signals held, so none is sent to
/// its pid once reaped. False (errno set) if it cannot be waited for.
bool wait_forwarded_child(pid_t pid, int& wait_status);

}  // namespace iolens::cli
