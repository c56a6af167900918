// SPDX-License-Identifier: Apache-2.0
#include "core/heap.hpp"

#include <dlfcn.h>
#include <malloc.h>

#include <cstddef>
#include <string>

namespace iolens::core {
namespace {

// jemalloc's control interface, looked up rather than linked: the core library is also linked
// into the unit tests, which run on glibc's malloc (or the sanitizers').
using Mallctl = int (*)(const char*, void*, std::size_t*, void*, std::size_t);

Mallctl mallctl_fn() {
  static const Mallctl fn = reinterpret_cast<Mallctl>(dlsym(RTLD_DEFAULT, "mallctl"));
  return fn;
}

}  // namespace

std::string heap_allocator() {
  if (const Mallctl ctl = mallctl_fn()) {
    const char* version = nullptr;
    std::size_t len = sizeof(version);
    if (ctl("version", &version, &len, nullptr, 0) == 0 && version)
      return std::string("jemalloc ") + version;
    return "jemalloc";
  }
  return "glibc malloc";
}

void heap_release() {
  if (const Mallctl ctl = mallctl_fn()) {
    // "arena.<MALLCTL_ARENAS_ALL>.purge": every arena's unused dirty pages given back.
    ctl("arena.4096.purge", nullptr, nullptr, nullptr, 0);
    return;
  }
  malloc_trim(0);
}

}  // namespace iolens::core
