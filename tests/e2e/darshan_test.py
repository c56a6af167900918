#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: `iolens run --darshan FILE` on tests/workloads/io_workload.c.

The log is parsed here by an independent reader written from the format's specification
(shared/DARSHAN.md: a 1328-byte header, zlib regions for the job, the names and each module,
704-byte POSIX records of 69 int64 counters and 17 doubles), then checked:
  - header: version "3.41", magic 6567223, zlib, no partial flag, the job region right after the
    header, regions contiguous to the end of the file, only the POSIX module (version 4);
  - job region: uid, start/end seconds of the run, nprocs = processes of the run, the command
    line, well-formed mount entries;
  - names: every record id is the Jenkins lookup8 hash (level 0) of its path, as Darshan makes
    them (an independent implementation below);
  - every counter the workload tallied for itself (its manifest: the ground truth) equals the
    Darshan record of that (process = rank, path); the common access sizes and strides also
    equal those of Darshan's own rule (a tree of 32 values, the workload's "darshan32") for
    every record, those past the 32 values (pread.dat's 1000 random strides) included;
  - every record equals the same run's iolens.run/1 JSON record, counter by counter (times and
    timestamps as seconds).
"""
import os
import struct
import sys
import zlib

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import e2e_common as E  # noqa: E402

COUNTERS = ("OPENS FILENOS DUPS READS WRITES SEEKS STATS MMAPS FSYNCS FDSYNCS RENAME_SOURCES "
            "RENAME_TARGETS RENAMED_FROM MODE BYTES_READ BYTES_WRITTEN MAX_BYTE_READ "
            "MAX_BYTE_WRITTEN CONSEC_READS CONSEC_WRITES SEQ_READS SEQ_WRITES RW_SWITCHES "
            "MEM_NOT_ALIGNED MEM_ALIGNMENT FILE_NOT_ALIGNED FILE_ALIGNMENT MAX_READ_TIME_SIZE "
            "MAX_WRITE_TIME_SIZE").split()
SIZES = "0_100 100_1K 1K_10K 10K_100K 100K_1M 1M_4M 4M_10M 10M_100M 100M_1G 1G_PLUS".split()
COUNTERS += ["SIZE_READ_" + s for s in SIZES] + ["SIZE_WRITE_" + s for s in SIZES]
COUNTERS += ["STRIDE%d_STRIDE" % i for i in range(1, 5)] + ["STRIDE%d_COUNT" % i for i in range(1, 5)]
COUNTERS += ["ACCESS%d_ACCESS" % i for i in range(1, 5)] + ["ACCESS%d_COUNT" % i for i in range(1, 5)]
COUNTERS += ["FASTEST_RANK", "FASTEST_RANK_BYTES", "SLOWEST_RANK", "SLOWEST_RANK_BYTES"]
FCOUNTERS = ("F_OPEN_START_TIMESTAMP F_READ_START_TIMESTAMP F_WRITE_START_TIMESTAMP "
             "F_CLOSE_START_TIMESTAMP F_OPEN_END_TIMESTAMP F_READ_END_TIMESTAMP "
             "F_WRITE_END_TIMESTAMP F_CLOSE_END_TIMESTAMP F_READ_TIME F_WRITE_TIME F_META_TIME "
             "F_MAX_READ_TIME F_MAX_WRITE_TIME F_FASTEST_RANK_TIME F_SLOWEST_RANK_TIME "
             "F_VARIANCE_RANK_TIME F_VARIANCE_RANK_BYTES").split()
assert len(COUNTERS) == 69 and len(FCOUNTERS) == 17

# iolens JSON counter -> Darshan POSIX counter
JSON_TO_DARSHAN = {c.lower(): c for c in COUNTERS
                   if c.lower() in (
                       "opens dups reads writes seeks stats mmaps fsyncs fdsyncs rename_sources "
                       "bytes_read bytes_written max_byte_read max_byte_written consec_reads "
                       "consec_writes seq_reads seq_writes rw_switches max_read_time_size "
                       "max_write_time_size mem_not_aligned mode").split()
                   or c.startswith(("ACCESS", "STRIDE"))}
for s in SIZES:
    JSON_TO_DARSHAN["size_read_" + s.lower()] = "SIZE_READ_" + s
    JSON_TO_DARSHAN["size_write_" + s.lower()] = "SIZE_WRITE_" + s
JSON_TO_DARSHAN_F = {
    "open_start_ns": "F_OPEN_START_TIMESTAMP", "read_start_ns": "F_READ_START_TIMESTAMP",
    "write_start_ns": "F_WRITE_START_TIMESTAMP", "close_start_ns": "F_CLOSE_START_TIMESTAMP",
    "open_end_ns": "F_OPEN_END_TIMESTAMP", "read_end_ns": "F_READ_END_TIMESTAMP",
    "write_end_ns": "F_WRITE_END_TIMESTAMP", "close_end_ns": "F_CLOSE_END_TIMESTAMP",
    "read_time_ns": "F_READ_TIME", "write_time_ns": "F_WRITE_TIME", "meta_time_ns": "F_META_TIME",
    "max_read_time_ns": "F_MAX_READ_TIME", "max_write_time_ns": "F_MAX_WRITE_TIME"}

M64 = (1 << 64) - 1


def lookup8(data, level=0):
    """Bob Jenkins' lookup8 hash (public domain algorithm), bytes read little-endian."""
    def mix(a, b, c):
        a = (a - b - c) & M64; a ^= c >> 43
        b = (b - c - a) & M64; b ^= (a << 9) & M64
        c = (c - a - b) & M64; c ^= b >> 8
        a = (a - b - c) & M64; a ^= c >> 38
        b = (b - c - a) & M64; b ^= (a << 23) & M64
        c = (c - a - b) & M64; c ^= b >> 5
        a = (a - b - c) & M64; a ^= c >> 35
        b = (b - c - a) & M64; b ^= (a << 49) & M64
        c = (c - a - b) & M64; c ^= b >> 11
        a = (a - b - c) & M64; a ^= c >> 12
        b = (b - c - a) & M64; b ^= (a << 18) & M64
        c = (c - a - b) & M64; c ^= b >> 22
        return a, b, c
    a = b = level
    c = 0x9e3779b97f4a7c13
    k = data
    while len(k) >= 24:
        a = (a + int.from_bytes(k[0:8], "little")) & M64
        b = (b + int.from_bytes(k[8:16], "little")) & M64
        c = (c + int.from_bytes(k[16:24], "little")) & M64
        a, b, c = mix(a, b, c)
        k = k[24:]
    c = (c + len(data)) & M64
    if len(k) > 16:
        c = (c + (int.from_bytes(k[16:], "little") << 8)) & M64
    if len(k) > 8:
        b = (b + int.from_bytes(k[8:16], "little")) & M64
    a = (a + int.from_bytes(k[0:8], "little")) & M64
    return mix(a, b, c)[2]


def inflate(region):
    out = b""
    while region:
        d = zlib.decompressobj()
        out += d.decompress(region) + d.flush()
        if not d.eof:
            raise ValueError("a zlib stream does not end")
        region = d.unused_data  # several concatenated streams are allowed
    return out


def check_alignment(ck, where, row, rec):
    """A JSON row's alignment counters against its Darshan record: FILE_ALIGNMENT as Darshan's
    rule (e2e_common, written from its source) gives it, the same in both; FILE_NOT_ALIGNED the
    row's (alignment_test.py checks it against a workload's own offsets); MEM_ALIGNMENT 8."""
    ck.eq("%s FILE_ALIGNMENT (Darshan's rule)" % where, E.darshan_file_alignment(row["path"]),
          rec["c"]["FILE_ALIGNMENT"])
    ck.eq("%s file_alignment vs the log" % where, rec["c"]["FILE_ALIGNMENT"],
          row["counters"]["file_alignment"])
    ck.eq("%s FILE_NOT_ALIGNED vs the row" % where, row["counters"]["file_not_aligned"],
          rec["c"]["FILE_NOT_ALIGNED"])
    ck.eq("%s MEM_ALIGNMENT (Darshan's default)" % where, 8, rec["c"]["MEM_ALIGNMENT"])


def parse(ck, blob, dxt=False):
    """The log's job, names and POSIX records. `dxt`: a DXT_POSIX region (module 10) may follow
    the POSIX one (a log of a traced run); it is not read here."""
    ck.check(len(blob) > 1328, "log shorter than its header: %d bytes" % len(blob))
    version, magic, comp = struct.unpack_from("<8sqB", blob, 0)
    ck.eq("version string", b"3.41\0\0\0\0", version)
    ck.eq("magic", 6567223, magic)
    ck.eq("compression (0 = zlib)", 0, comp)
    ck.eq("padding after comp_type", b"\0" * 7, blob[17:24])
    partial, names_off, names_len = struct.unpack_from("<QQQ", blob, 24)
    ck.eq("partial_flag", 0, partial)
    mod_map = [struct.unpack_from("<QQ", blob, 48 + 16 * i) for i in range(64)]
    mod_ver = struct.unpack_from("<64I", blob, 1072)
    ck.eq("POSIX module version", 4, mod_ver[1])
    for i in range(64):
        if i != 1 and not (dxt and i == 10):
            ck.eq("module %d map" % i, (0, 0), mod_map[i])
    posix_off, posix_len = mod_map[1]
    ck.eq("name region follows the job region", True, names_off > 1328)
    ck.eq("POSIX region follows the name region", names_off + names_len, posix_off)
    if dxt and mod_map[10] != (0, 0):
        ck.eq("DXT_POSIX region follows the POSIX region", posix_off + posix_len, mod_map[10][0])
        ck.eq("file ends with the DXT_POSIX region", len(blob), sum(mod_map[10]))
    else:
        ck.eq("file ends with the POSIX region", len(blob), posix_off + posix_len)

    job = inflate(blob[1328:names_off])
    ck.check(len(job) > 1080, "job region too short: %d" % len(job))
    uid, ssec, snsec, esec, ensec, nprocs, jobid = struct.unpack_from("<7q", job, 0)
    meta = job[56:1080].split(b"\0", 1)[0].decode()
    rest = job[1080:].split(b"\0", 1)[0].decode()
    exe, *mounts = rest.split("\n")
    for m in mounts:
        ck.check(len(m.split("\t")) == 2 and all(m.split("\t")) and " " not in m,
                 "malformed mount entry %r" % m)
    names = {}
    raw = inflate(blob[names_off:names_off + names_len])
    pos = 0
    while pos < len(raw):
        (rid,) = struct.unpack_from("<Q", raw, pos)
        end = raw.index(b"\0", pos + 8)
        names[rid] = raw[pos + 8:end].decode("utf-8", "surrogateescape")
        pos = end + 1
    recs = []
    raw = inflate(blob[posix_off:posix_off + posix_len])
    ck.eq("POSIX region is whole 704-byte records", 0, len(raw) % 704)
    for pos in range(0, len(raw) - len(raw) % 704, 704):
        vals = struct.unpack_from("<Qq69q17d", raw, pos)
        recs.append({"id": vals[0], "rank": vals[1], "c": dict(zip(COUNTERS, vals[2:71])),
                     "f": dict(zip(FCOUNTERS, vals[71:]))})
    return {"uid": uid, "start": (ssec, snsec), "end": (esec, ensec), "nprocs": nprocs,
            "jobid": jobid, "meta": meta, "exe": exe, "mounts": mounts, "names": names,
            "recs": recs}


def main():
    args = E.parse_args(workload=True)
    E.require_root()
    ck = E.Checker("darshan")
    tmp = E.disk_tempdir("darshan")
    work = os.path.join(tmp, "work")
    os.mkdir(work)
    out_json = os.path.join(tmp, "run.json")
    out_log = os.path.join(tmp, "run.darshan")
    run = E.run_iolens(args.iolens, [args.workload, work, "-"], json_path=out_json,
                       extra=["--darshan", out_log], timeout=240)
    if run.rc != 0:
        ck.fatal("iolens exited %d; stderr:\n%s" % (run.rc, run.err_text()))
    manifest = E.parse_manifest(ck, run.out)
    doc = E.load_run(ck, run)
    with open(out_log, "rb") as f:
        log = parse(ck, f.read())

    # job region against the run
    ck.eq("nprocs", len(doc["processes"]), log["nprocs"])
    ck.eq("uid", os.getuid(), log["uid"])
    ck.eq("start seconds", doc["start_ns"] // 10**9, log["start"][0])
    ck.eq("end seconds", doc["end_ns"] // 10**9, log["end"][0])
    ck.eq("command line", " ".join(doc["command"]), log["exe"])
    ck.check(any(m.endswith("\t/") for m in log["mounts"]), "no mount entry for /: %r" %
             log["mounts"][:5])
    ck.check("lib_ver=" in log["meta"], "metadata lacks lib_ver: %r" % log["meta"])

    # names: Darshan's record ids
    for rid, path in log["names"].items():
        ck.eq("record id of %s" % path, lookup8(path.encode("utf-8", "surrogateescape")), rid)

    ranks = [p["pid"] for p in doc["processes"]]  # ranks are processes in start order
    by_key = {}
    for r in log["recs"]:
        # io_workload has no file every process touches, so no shared (rank -1) record here:
        # tests/e2e/by_file_test.py checks those.
        ck.check(0 <= r["rank"] < len(ranks), "rank %d out of range" % r["rank"])
        path = log["names"].get(r["id"])
        ck.check(path is not None, "record id %x has no name" % r["id"])
        by_key[(ranks[r["rank"]], path)] = r
    # one record per JSON file record, and one per new name of a rename (ckpt.pt: the workload
    # renames ckpt.tmp, and never opens the new name)
    renamed = [(mp["pid"], mf["path"], mf["renamed_to"]) for mp in manifest["processes"]
               for mf in mp["files"] if "renamed_to" in mf]
    ck.check(len(renamed) >= 1, "the workload renamed nothing")
    ck.eq("Darshan records: JSON file records + new names", len(doc["files"]) + len(renamed),
          len(log["recs"]))
    # Darshan's rename wrapper: the new path's record gets RENAME_TARGETS and RENAMED_FROM (the
    # record id of the old path), and nothing else; the old path's record has the source.
    for pid, old, new in renamed:
        r = by_key.get((pid, new))
        if not ck.check(r is not None, "no Darshan record of the new name %s" % new):
            continue
        ck.eq("%s RENAME_TARGETS" % new, 1, r["c"]["RENAME_TARGETS"])
        ck.eq("%s RENAMED_FROM" % new, lookup8(old.encode()), r["c"]["RENAMED_FROM"] & M64)
        for n in ("OPENS", "READS", "WRITES", "BYTES_WRITTEN", "RENAME_SOURCES", "STATS"):
            ck.eq("%s %s (a name only renamed to)" % (new, n), 0, r["c"][n])
        ck.eq("%s MEM_ALIGNMENT" % new, 8, r["c"]["MEM_ALIGNMENT"])
        src = by_key.get((pid, old))
        if ck.check(src is not None, "no Darshan record of %s" % old):
            ck.eq("%s RENAME_SOURCES" % old, 1, src["c"]["RENAME_SOURCES"])
            ck.eq("%s RENAME_TARGETS" % old, 0, src["c"]["RENAME_TARGETS"])
            ck.eq("%s FILE_ALIGNMENT (the source's)" % new, src["c"]["FILE_ALIGNMENT"],
                  r["c"]["FILE_ALIGNMENT"])

    # ground truth: the workload's own tallies
    checked = 0
    for mp in manifest["processes"]:
        for mf in mp["files"]:
            r = by_key.get((mp["pid"], mf["path"]))
            if not ck.check(r is not None, "no Darshan record for pid %d %s" %
                            (mp["pid"], mf["path"])):
                continue
            for name, val in mf["counters"].items():
                if name in JSON_TO_DARSHAN:
                    want = max(val, 0) if name.startswith("max_byte") else val
                    ck.eq("pid %d %s %s" % (mp["pid"], mf["path"], JSON_TO_DARSHAN[name]),
                          want, r["c"][JSON_TO_DARSHAN[name]])
                    checked += 1

    # Darshan's own rule for the access sizes and strides (32 values): the same four in every
    # record, those with more distinct values (pread.dat's 1000 random strides, past the
    # record's 8 slots and past the 32) included.
    same32 = over = 0
    for mp in manifest["processes"]:
        for mf in mp["files"]:
            r = by_key.get((mp["pid"], mf["path"]))
            if r is None:
                continue
            for kind in ("access", "stride"):
                names = [n for n in mf["darshan32"] if n.startswith(kind)]
                over += mf["counters"][kind + "_untallied"] != 0
                for n in names:
                    ck.eq("pid %d %s %s (Darshan's 32)" % (mp["pid"], mf["path"], n.upper()),
                          mf["darshan32"][n], r["c"][n.upper()])
                same32 += 1
    ck.check(same32 > 3000, "too few records compared with Darshan's 32-value rule: %d" % same32)
    ck.check(over >= 1, "no record with more distinct values than Darshan's 32 (pread.dat)")

    # the same run's JSON, every mapped counter
    for f in doc["files"]:
        r = by_key.get((f["pid"], f["path"]))
        if not ck.check(r is not None, "no Darshan record for JSON record %d %s" %
                        (f["pid"], f["path"])):
            continue
        for name, dname in JSON_TO_DARSHAN.items():
            ck.eq("%d %s %s vs JSON" % (f["pid"], f["path"], dname), f["counters"][name],
                  r["c"][dname])
        for name, dname in JSON_TO_DARSHAN_F.items():
            want = f["counters"][name] / 1e9
            ck.check(abs(r["f"][dname] - want) <= 1e-9 * max(1.0, abs(want)),
                     "%d %s %s: %r vs JSON %r s" % (f["pid"], f["path"], dname, r["f"][dname], want))
        check_alignment(ck, "%d %s" % (f["pid"], f["path"]), f, r)
        # A record of one rank carries no rank extremes: Darshan sets them only in a shared
        # record's reduction (posix_mpi_redux), whatever the rank's own bytes and time.
        for n in ("FASTEST_RANK", "FASTEST_RANK_BYTES", "SLOWEST_RANK", "SLOWEST_RANK_BYTES"):
            ck.eq("%d %s %s (unshared)" % (f["pid"], f["path"], n), 0, r["c"][n])
        for n in ("F_FASTEST_RANK_TIME", "F_SLOWEST_RANK_TIME"):
            ck.eq("%d %s %s (unshared)" % (f["pid"], f["path"], n), 0.0, r["f"][n])
    E.log("darshan: %d records, %d names, %d manifest counters checked" %
          (len(log["recs"]), len(log["names"]), checked))
    ck.check(checked > 3000 * 10, "too few manifest counters compared: %d" % checked)
    ck.finish()


if __name__ == "__main__":
    main()
