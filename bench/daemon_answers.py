#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""How long iolensd keeps a client waiting while it works on a big job, and its peak memory.

Not a test: nothing passes or fails. Root only (it starts iolensd, makes cgroups, runs a job).

    sudo /usr/bin/python3 bench/daemon_answers.py --iolensd BUILD/agent/daemon/iolensd \\
        --workload BUILD/tests/workloads/job_workload [--iolensd OTHER ...] [--files 50000] [--why]
        [--default-limits]

For each iolensd given (one after the other, the same job each): a job cgroup runs
`job_workload many DIR N 100` on /dev/shm (N files created, written, read back, unlinked), the
cgroup is removed, and a thread asks `status` on the control socket every 20 ms from the start
of the job until its record is on disk. Printed per build: the longest wait for an answer while
the job ran and from the removal to the record (by when the answer came), the answers longer
than 100 ms, the oldest answer (its "age_ms": a daemon whose loop was busy answers what it
published last; 0 for builds before the control socket's front thread), the longest wait of a
/metrics scrape made every 100 ms beside it, how long the record took to appear, its size, and the daemon's VmHWM; then how
long `job` of the closed job takes asked as `iolens job` asks (with "fd": the record comes as a
descriptor; a daemon that does not know "fd" answers a page) and as an older client asks (a
page of 10), and the longest wait for `status` meanwhile. The record
is not parsed here (a Python parse of a big record holds the interpreter long enough to look
like a stalled daemon). With --why, each wait over 100 ms is followed by what the daemon says
it did meanwhile (its own `status`: drains and saves completed, how long the last took, and in
how many pieces the last drain went).

Uses the e2e harness (tests/e2e/daemon_common.py) to start the daemon and make the cgroups.
"""
import argparse
import os
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402


def measure(iolensd, workload, nfiles, compression=None, default_limits=False):
    ck = E.Checker("daemon_answers")
    cg = D.Cgroups()
    data = D.tempdir("answers", base="/dev/shm")
    rules = '  - cgroup: {paths: ["%s/a/*"]}' % cg.prefix
    # Sized to hold the whole job unfolded (its records and its names: without the name bounds
    # given, the 5 MiB of names the default bound derives folded part of it, a different part
    # each run), or (--default-limits) the limits a node owner gets without configuring any
    # (the 256 MiB memory bound's: records fold as the job grows).
    sized = "" if default_limits else (
        "limits:\n  kernel_file_records: 262144\n  ring_size: 64MiB\n  max_records: %d\n"
        "  max_path_bytes: 256MiB\n  max_path_bytes_per_job: 256MiB\n" % (2 * nfiles))
    d = D.Daemon(iolensd, rules,
                 args=[] if default_limits else ["--max-files-per-job", str(2 * nfiles)],
                 tag="answers", extra_config=sized +
                 ("record_compression: %s\n" % compression if compression else ""))
    d.start(ck)
    cg.mkdir("a/big")
    job_id = "cgroup" + cg.rel("a/big")
    d.wait_live(ck, [job_id])
    waits = []  # (start, seconds, the answer's age_ms: how old the loop's answer was, or 0)
    slow = []   # what the daemon did during each wait over 100 ms (from its own status)
    stop = [False]

    def poll():
        prev = None
        while not stop[0]:
            t = time.monotonic()
            st = None
            try:
                a = d.request({"cmd": "status"}, timeout=120)
                st = a.get("result") if a.get("ok") else None
            except OSError:
                pass
            w = time.monotonic() - t
            # Daemons with the control socket's front thread say how old their answer is
            # (the loop was busy: the last one it published); older ones answer from the loop.
            waits.append((t, w, (st or {}).get("age_ms", 0) / 1e3))
            if st and prev and w > 0.1:
                dr, sv = st.get("drain", {}), st.get("state", {})
                pdr, psv = prev.get("drain", {}), prev.get("state", {})
                slow.append("%.2f s: %d drain(s), the last %.0f ms in %d piece(s), its longest "
                            "%.0f ms; %d save(s), the last %.0f ms" %
                            (w, dr.get("count", 0) - pdr.get("count", 0), dr.get("last_us", 0) / 1e3,
                             dr.get("last_pieces", 1), dr.get("last_longest_piece_us",
                                                              dr.get("last_us", 0)) / 1e3,
                             sv.get("saves", 0) - psv.get("saves", 0), sv.get("last_us", 0) / 1e3)
                            + ("" if "last_in_loop_us" not in sv else
                               " (%.0f ms of it in the loop" % (sv["last_in_loop_us"] / 1e3)
                               + ("" if "last_gather_us" not in sv else
                                  ": %.0f gathering, %.0f deleting what it holds" %
                                  (sv["last_gather_us"] / 1e3, sv["last_collect_us"] / 1e3))
                               + ")"))
            prev = st or prev
            time.sleep(0.02)
    # /metrics scraped beside it every 100 ms (served by the exporter's threads from the last
    # snapshot the loop published): how long a scrape waits.
    scrapes = []  # (start, seconds)
    port = ((d.status() or {}).get("metrics") or {}).get("ports", [None])[0]

    def scrape():
        while port and not stop[0]:
            t = time.monotonic()
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                            timeout=120) as r:
                    r.read()
            except OSError:
                pass
            scrapes.append((t, time.monotonic() - t))
            time.sleep(0.1)
    th = threading.Thread(target=poll)
    th.start()
    th_scrape = threading.Thread(target=scrape)
    th_scrape.start()
    t_job = time.monotonic()
    p = D.run_in_cgroup(cg.abs("a/big"), [workload, "many", data, str(nfiles), "100"])
    D.finish_workload(ck, p, "job_workload many", timeout=300)
    # The live job asked for as `iolens job` asks (every page of it, joined), then a page of 10
    # twice more: how long the client waits, and how old `status` answers get meanwhile (the
    # loop's time on it).
    t_live = time.monotonic()
    cli = os.path.join(os.path.dirname(os.path.dirname(iolensd)), "cli", "iolens")
    out = subprocess.run([cli, "job", job_id, "--json", "--socket", d.socket],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    live_whole = (time.monotonic() - t_live, len(out.stdout), out.returncode)
    live_pages = []
    for _ in range(2):
        t = time.monotonic()
        a = d.request({"cmd": "job", "id": job_id, "limit": 10}, timeout=300)
        live_pages.append((time.monotonic() - t, "answered" if a.get("ok") else "refused"))
    t_live_end = time.monotonic()
    t_rm = time.monotonic()
    cg.rmdir("a/big")
    name = d.wait_record_file(300)
    t_rec = time.monotonic()
    time.sleep(0.5)
    # The closed job asked for as `iolens job` does (with "fd": a daemon that does not know it
    # answers a page) and as an older client does (a page, no "fd").
    t_ask = time.monotonic()
    asked = {}
    for what, fd in (("fd", True), ("page", False)):
        t = time.monotonic()
        fds = []  # the record's descriptor, not read here (see above)
        req = {"cmd": "job", "id": job_id, "limit": 10}
        if fd:
            req["fd"] = True
        a = D.control(d.socket, req, 300, received=fds)
        for f in fds:
            os.close(f)
        asked[what] = (time.monotonic() - t, "answered" if a.get("ok") else "refused")
    time.sleep(0.2)
    stop[0] = True
    th.join()
    th_scrape.join()
    size = os.path.getsize(os.path.join(d.output_dir, name)) if name else 0
    hwm = D.read_rss_kib(d.proc.pid)[1]
    d.stop()
    # By when the answer came: one asked during the job but answered after the removal waited
    # for the close.
    run = [w for t, w, _ in waits if t + w < t_live]
    age_live = [age for t, w, age in waits if t_live <= t + w < t_live_end]
    close = [w for t, w, _ in waits if t_rm <= t + w < t_ask]
    ask = [w for t, w, _ in waits if t + w >= t_ask]
    age_run = [age for t, w, age in waits if t + w < t_live]
    age_close = [age for t, w, age in waits if t_rm <= t + w < t_ask]
    return {"job_s": t_live - t_job, "record_s": t_rec - t_rm, "record_mb": size / 1e6,
            "max_run": max(run or [0]), "max_close": max(close or [0]),
            "slow_run": sum(w > 0.1 for w in run), "slow_close": sum(w > 0.1 for w in close),
            "answers": len(waits), "hwm_mib": hwm / 1024, "slow": slow, "asked": asked,
            "max_ask": max(ask or [0]), "max_scrape": max([w for _, w in scrapes] or [0]),
            "scrapes": len(scrapes), "age_run": max(age_run or [0]),
            "age_close": max(age_close or [0]), "live_whole": live_whole,
            "live_pages": live_pages, "age_live": max(age_live or [0])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iolensd", action="append", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--files", type=int, default=50000)
    ap.add_argument("--why", action="store_true",
                    help="after each build's line, what the daemon did during each wait over "
                         "100 ms: drains and saves completed meanwhile, from its status")
    ap.add_argument("--record-compression", action="append", choices=("zstd", "none"),
                    help="run each build once per value given, with that record_compression "
                         "(builds before it existed refuse the key: leave it out for them)")
    ap.add_argument("--default-limits", action="store_true",
                    help="the daemon's default limits (the memory bound's) instead of limits "
                         "that hold the whole job")
    a = ap.parse_args()
    D.require_root()
    print("| iolensd | job | longest wait, job running (> 100 ms) | record after removal "
          "| longest wait, removal to record (> 100 ms) | oldest answer: running / to record "
          "| record | VmHWM | `job` of the closed job: with fd / a page | longest wait meanwhile "
          "| longest /metrics scrape (scrapes) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for build, compression in [(b, c) for b in a.iolensd for c in a.record_compression or [None]]:
        r = measure(os.path.realpath(build), os.path.realpath(a.workload), a.files, compression,
                    a.default_limits)
        if compression:
            build = "%s (%s)" % (build, compression)
        fd_s, fd_how = r["asked"]["fd"]
        pg_s, pg_how = r["asked"]["page"]
        print("| %s | %d files, %.1f s | %.2f s (%d) | %.1f s | %.2f s (%d) | %.2f / %.2f s "
              "| %.1f MB | %.0f MiB | %.2f s (%s) / %.2f s (%s) | %.2f s | %.2f s (%d) |" %
              (build, a.files, r["job_s"], r["max_run"], r["slow_run"], r["record_s"],
               r["max_close"], r["slow_close"], r["age_run"], r["age_close"], r["record_mb"],
               r["hwm_mib"], fd_s, fd_how, pg_s, pg_how, r["max_ask"], r["max_scrape"],
               r["scrapes"]), flush=True)
        lw_s, lw_bytes, lw_rc = r["live_whole"]
        print("    live job: `iolens job --json` %.2f s (%.1f MB, exit %d); a page of 10: %s; "
              "oldest `status` answer meanwhile %.2f s" %
              (lw_s, lw_bytes / 1e6, lw_rc,
               " / ".join("%.2f s (%s)" % p for p in r["live_pages"]), r["age_live"]),
              flush=True)
        if a.why:
            for line in r["slow"]:
                print("    " + line, flush=True)


if __name__ == "__main__":
    main()
