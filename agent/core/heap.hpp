// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The memory allocator the process runs with, and giving its freed memory back to the kernel.
/// iolensd is linked with jemalloc (CMake option IOLENS_JEMALLOC; docs/daemon.md#memory-allocator):
/// its records, names and folds make and free millions of small tree and hash nodes, and glibc's
/// malloc spent a fifth of the daemon's time on them (bench/README.md "The allocator"). The
/// libraries and tests run with whichever allocator their process has; this asks at run time.

#include <string>

namespace iolens::core {

/// "jemalloc 5.3.0-0-g54eaed1d8b56..." when the process runs on jemalloc (linked or
/// preloaded), else "glibc malloc".
std::string heap_allocator();

/// Gives the pages of freed memory back to the kernel, now: jemalloc's arenas purged, or
/// glibc's malloc_trim(0). Both hold the allocator's locks while they work: call it off the
/// daemon's loop, after a big release (a written job record, a state save).
void heap_release();

}  // namespace iolens::core
