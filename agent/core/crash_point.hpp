// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Crash points: places in iolensd's writing of a record and saving of its state where a test
/// can have it die by SIGKILL, to prove that a restart loses nothing and writes nothing twice
/// (docs/daemon.md#crash-points, tests/e2e/daemon_crash_points_test.py).
///
/// IOLENS_CRASH_AT=<point> in the environment: the process SIGKILLs itself the first time it
/// reaches <point>; with IOLENS_CRASH_AFTER=<other> as well, the first time after it has passed
/// <other>. Unset (always, outside tests), a crash point costs a load and a branch.

namespace iolens::core {

/// The points, in the order a job's record and the save after it reach them.
inline constexpr const char* kCrashPoints[] = {
    "darshan_written",  // the Darshan log's temporary written and synced, not renamed
    "darshan_renamed",  // the log in place, the record not begun
    "record_written",   // the record's temporary written and synced, not renamed
    "record_renamed",   // the record in place, the state not saved since
    "state_written",    // the state's temporary written and synced, not renamed
    "state_renamed",    // the state renamed over the old one, its directory not synced
};

/// Dies by SIGKILL here if the environment asks for `point` (see above); else returns.
void crash_point(const char* point);

/// Whether `point` is one of kCrashPoints (iolensd refuses an unknown one at start).
bool known_crash_point(const char* point);

}  // namespace iolens::core
