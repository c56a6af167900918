// SPDX-License-Identifier: Apache-2.0
#include "core/events.hpp"

#include <cstddef>
#include <cstring>
#include <algorithm>

#include "iolens_abi.h"

namespace iolens::core {
namespace {

std::string bounded_string(const char* s, std::size_t max) {
  std::size_t n = 0;
  while (n < max && s[n] != '\0') ++n;
  return std::string(s, n);
}

ProcKey key_of(const iolens_event_header& h) { return ProcKey{h.tgid, h.pstart_ns}; }

DecodeResult fail(std::string why) {
  DecodeResult r;
  r.error = std::move(why);
  return r;
}

}  // namespace

DecodeResult decode_event(std::span<const uint8_t> bytes) {
  iolens_event_header h{};
  if (bytes.size() < sizeof(h)) return fail("record shorter than its header");
  std::memcpy(&h, bytes.data(), sizeof(h));
  DecodeResult r;
  switch (h.type) {
    case IOLENS_EV_FORK: {
      iolens_fork_event e{};
      if (bytes.size() < sizeof(e)) return fail("short fork record");
      std::memcpy(&e, bytes.data(), sizeof(e));
      r.event = ForkEvent{key_of(h), ProcKey{e.ppid, e.parent_pstart_ns}, h.ts_ns,
                          bounded_string(e.comm, sizeof(e.comm)), h.cgroup_id};
      break;
    }
    case IOLENS_EV_EXIT: {
      iolens_exit_event e{};
      if (bytes.size() < sizeof(e)) return fail("short exit record");
      std::memcpy(&e, bytes.data(), sizeof(e));
      r.event = ExitEvent{key_of(h), h.ts_ns, e.exit_code};
      break;
    }
    case IOLENS_EV_PATH: {
      constexpr std::size_t head = offsetof(iolens_path_event, data);
      if (bytes.size() < head) return fail("short path record");
      iolens_path_event e;
      std::memcpy(&e, bytes.data(), head);
      const std::size_t data_len = bytes.size() - head;
      const std::size_t lens[4] = {e.walk_len, e.str1_len, e.walk2_len, e.str2_len};
      std::size_t total = 0;
      for (auto l : lens) total += l;
      if (total > data_len) return fail("path record lengths exceed the record");
      const char* d = reinterpret_cast<const char*>(bytes.data() + head);
      PathEvent p;
      p.proc = key_of(h);
      p.ts_ns = h.ts_ns;
      p.op = e.op;
      p.flags = e.flags;
      p.dev = e.dev;
      p.ino = e.ino;
      p.gen = e.gen;
      std::size_t off = 0;
      std::string* outs[4] = {&p.walk, &p.str1, &p.walk2, &p.str2};
      for (int i = 0; i < 4; ++i) {
        std::string s(d + off, lens[i]);
        // User strings carry their NUL terminator; walks are NUL-separated components.
        if (i % 2 == 1 && !s.empty() && s.back() == '\0') s.pop_back();
        *outs[i] = std::move(s);
        off += lens[i];
      }
      p.comm = bounded_string(e.comm, sizeof(e.comm));
      if (p.op < IOLENS_PATH_FILE || p.op > IOLENS_PATH_RENAME) return fail("unknown path op");
      r.event = std::move(p);
      break;
    }
    case IOLENS_EV_CGROUP: {
      constexpr std::size_t head = offsetof(iolens_cgroup_event, path);
      if (bytes.size() < head) return fail("short cgroup record");
      iolens_cgroup_event e;
      std::memcpy(&e, bytes.data(), head);
      if (e.op != IOLENS_CGROUP_MKDIR && e.op != IOLENS_CGROUP_RMDIR)
        return fail("unknown cgroup op");
      const std::size_t avail = std::min<std::size_t>(bytes.size() - head, sizeof(e.path));
      if (e.path_len > avail) return fail("cgroup record path exceeds the record");
      CgroupEvent c;
      c.created = e.op == IOLENS_CGROUP_MKDIR;
      c.id = h.cgroup_id;
      c.level = e.level;
      c.path = bounded_string(reinterpret_cast<const char*>(bytes.data() + head), e.path_len);
      c.truncated = (e.flags & IOLENS_PATH_TRUNCATED) != 0;
      c.ts_ns = h.ts_ns;
      r.job = std::move(c);
      break;
    }
    case IOLENS_EV_MARK: {
      iolens_mark_event e{};
      if (bytes.size() < sizeof(e)) return fail("short mark record");
      std::memcpy(&e, bytes.data(), sizeof(e));
      if (e.reason > IOLENS_MARK_UNTRACED) return fail("unknown mark reason");
      r.job = MarkEvent{key_of(h), ProcKey{e.ppid, e.parent_pstart_ns}, h.cgroup_id, e.reason,
                        e.threads, bounded_string(e.comm, sizeof(e.comm)), h.ts_ns};
      break;
    }
    default:
      return fail("unknown event type " + std::to_string(h.type));
  }
  r.ok = true;
  return r;
}

}  // namespace iolens::core
