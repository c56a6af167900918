// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Sample traces for the trace file tests (unit/trace_file_test.cpp) and the fuzz seeds
/// (fuzz/trace_seeds.cpp): every field set, extreme values, hostile strings; and a comparison
/// that names the first difference between two traces.

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "trace/trace.hpp"

namespace iolens::trace::samples {

/// Strings a path, a comm or an argument may hold: every byte 0x01..0xff in one string, a
/// newline, a quote, a backslash, invalid UTF-8 (a lone 0xff, an overlong '/', a surrogate, a
/// cut sequence), a NUL inside, valid non-ASCII UTF-8, the empty string.
inline std::vector<std::string> hostile_strings() {
  std::string every_byte;
  for (int c = 1; c < 256; ++c) every_byte.push_back(static_cast<char>(c));
  return {every_byte,        "/data/line\nbreak", "/data/quo\"te",          "/data/back\\slash",
          "/data/\xff\xfe",  "/data/\xc0\xaf",     "/data/\xed\xa0\x80",     "/data/cut\xe2\x82",
          std::string("/data/nul\0inside", 16),   "/data/caf\xc3\xa9 \xf0\x9f\x93\x81", ""};
}

inline Meta meta() {
  Meta m;
  m.producer = "iolens 0.1.0";
  m.node = "node-\xff\x01";
  m.target = "cgroup:/kubepods.slice/pod\"x\"/\n";
  m.job_kind = "kubernetes";
  m.job_id = "0f3e9a7c-1d2b-4c5d-8e9f-0a1b2c3d4e5f";
  m.job_labels = {{"namespace", "ml"}, {"pod", "train-0"}, {"\xff key", "value\xfe\n"}, {"", ""}};
  m.command = hostile_strings();
  m.window_start_ns = 1'000'000'000'123ull;
  m.window_end_ns = 0;  // the trailer's
  m.mono_to_wall_ns = -1'700'000'000'000'000'000ll;
  m.ring_bytes = 64u << 20;
  m.abi_version = IOLENS_ABI_VERSION;
  // Darshan's mount table (ABI 14), a hostile point among them
  m.alignment_mounts = {{"/data/\xff x", 65536}, {"/data", 1 << 20}, {"/", 4096}, {"", -1}};
  return m;
}

inline std::vector<FileName> files(std::size_t n) {
  const auto names = hostile_strings();
  std::vector<FileName> out;
  for (std::size_t i = 0; i < n; ++i) {
    FileName f;
    f.ino = i == 0 ? std::numeric_limits<uint64_t>::max() : 1000 + i;
    f.dev = static_cast<uint32_t>((8u << 20) | (i % 4));
    f.gen = static_cast<uint32_t>(i * 2654435761u);
    f.path = i < names.size() ? names[i] : "/data/shard-" + std::to_string(i) + ".tar";
    f.flags = static_cast<uint32_t>(i % 4);
    out.push_back(f);
  }
  return out;
}

inline std::vector<Process> processes(std::size_t n) {
  std::vector<Process> out;
  for (std::size_t i = 0; i < n; ++i) {
    Process p;
    p.pid = static_cast<uint32_t>(100 + i);
    p.pstart_ns = 5'000'000'000ull + i * 1'000'000;
    p.ppid = i == 0 ? 1 : 100;
    p.parent_pstart_ns = i == 0 ? 0 : 5'000'000'000ull;
    p.comm = i % 2 ? "pt_data_worker" : "python3\n\xff";
    p.exe = i % 3 ? "/usr/bin/python3.11" : "";
    p.exit_ns = i % 2 ? -1 : static_cast<int64_t>(9'000'000'000ull + i);
    p.exit_code = i % 2 ? -1 : static_cast<int32_t>(i << 8);
    out.push_back(p);
  }
  return out;
}

/// `n` records with every field varying (deterministic in `seed`); record 0 holds the extremes.
inline std::vector<iolens_trace_record> ops(std::size_t n, uint64_t seed = 1) {
  std::vector<iolens_trace_record> out(n);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull;
  for (std::size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    iolens_trace_record& r = out[i];
    r.start_ns = 1'000'000'000'000ull + i * 1500 + x % 1000;
    r.end_ns = r.start_ns + x % 100'000;
    r.pstart_ns = 5'000'000'000ull + (x % 4) * 1'000'000;
    r.ino = 1000 + x % 64;
    r.dev = static_cast<uint32_t>((8u << 20) | (x % 4));
    r.gen = static_cast<uint32_t>(x >> 32);
    r.offset = i % 7 == 0 ? -1 : static_cast<int64_t>(i * 4096);
    r.ret = i % 11 == 0 ? -2 : static_cast<int64_t>(x % 65536);
    r.arg = static_cast<int64_t>(x % 65536);
    r.tgid = static_cast<uint32_t>(100 + x % 4);
    r.tid = r.tgid + static_cast<uint32_t>(x % 3);
    r.op = static_cast<uint16_t>(1 + i % 13);
    r.nr = static_cast<uint16_t>(x % 450);
    r.flags = static_cast<uint32_t>(x % 8);
    r.fd = static_cast<int32_t>(x % 64) - 1;
    r.pad = 0;
  }
  if (n > 0) {
    iolens_trace_record& r = out[0];
    r.start_ns = r.end_ns = r.pstart_ns = r.ino = std::numeric_limits<uint64_t>::max();
    r.dev = r.gen = r.tgid = r.tid = r.flags = r.pad = std::numeric_limits<uint32_t>::max();
    r.offset = std::numeric_limits<int64_t>::min();
    r.ret = std::numeric_limits<int64_t>::max();
    r.arg = -1;
    r.op = r.nr = std::numeric_limits<uint16_t>::max();
    r.fd = std::numeric_limits<int32_t>::min();
  }
  return out;
}

inline Losses losses() {
  Losses l;
  l.produced = 123'456'789;
  l.ring_full = 1234;
  l.size_limit = 56;
  l.other = 7;
  l.notes = {"ring full during epoch 3", "a note with \"quotes\", \\ and \xff\n"};
  return l;
}

/// "" when equal, else what differs first.
inline std::string difference(const Trace& a, const Trace& b) {
  const Meta &x = a.meta, &y = b.meta;
  if (x.producer != y.producer || x.node != y.node || x.target != y.target ||
      x.job_kind != y.job_kind || x.job_id != y.job_id)
    return "meta strings";
  if (x.job_labels != y.job_labels) return "meta job_labels";
  if (x.command != y.command) return "meta command";
  if (x.window_start_ns != y.window_start_ns || x.window_end_ns != y.window_end_ns ||
      x.mono_to_wall_ns != y.mono_to_wall_ns || x.ring_bytes != y.ring_bytes)
    return "meta numbers";
  if (x.alignment_mounts != y.alignment_mounts) return "meta alignment_mounts";
  if (a.files.size() != b.files.size()) return "file count";
  for (std::size_t i = 0; i < a.files.size(); ++i) {
    const FileName &f = a.files[i], &g = b.files[i];
    if (f.ino != g.ino || f.dev != g.dev || f.gen != g.gen || f.path != g.path || f.flags != g.flags)
      return "file " + std::to_string(i);
  }
  if (a.processes.size() != b.processes.size()) return "process count";
  for (std::size_t i = 0; i < a.processes.size(); ++i) {
    const Process &p = a.processes[i], &q = b.processes[i];
    if (p.pid != q.pid || p.pstart_ns != q.pstart_ns || p.ppid != q.ppid ||
        p.parent_pstart_ns != q.parent_pstart_ns || p.comm != q.comm || p.exe != q.exe ||
        p.exit_ns != q.exit_ns || p.exit_code != q.exit_code)
      return "process " + std::to_string(i);
  }
  if (a.ops.size() != b.ops.size()) return "op count";
  for (std::size_t i = 0; i < a.ops.size(); ++i)
    if (std::memcmp(&a.ops[i], &b.ops[i], sizeof(iolens_trace_record)) != 0)
      return "op " + std::to_string(i);
  const Losses &l = a.losses, &m = b.losses;
  if (l.produced != m.produced || l.ring_full != m.ring_full || l.size_limit != m.size_limit ||
      l.other != m.other || l.notes != m.notes)
    return "losses";
  if (a.complete != b.complete) return "complete";
  return "";
}

}  // namespace iolens::trace::samples
