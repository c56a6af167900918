#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: a job that forks thousands of short processes stays within limits.max_processes_per_job,
in the daemon, in the `job` answer and in its record, with exact totals (issue 21).

iolensd with `limits.max_processes_per_job: 200`, a cgroup rule P/frk/* (P = /iolens-e2e-<pid>).
One job runs `job_workload forks DIR 3000 SIZE`: 3,000 children one after the other, each
writing SIZE bytes to a file of its own with one write and exiting (ground truth: the
workload's manifest, and 3,000 + 1 processes). Without the bound the daemon keeps every
process, the record lists 3,001 of them and one `job` request answers them all.

Checks: `status` answers while the job forks; after the last exit, the live job's `job` answer
is one page (at most the default 1,000 files; at most `limit` with a `limit`), `page` gives
the totals and the next offset, and `iolens job ID --json` joins the pages; in the answer and
in the record: at most 200 + 1 process rows (the kept ones, then "<other processes>"),
job.processes = 3,001, job.folded_processes = 3,001 - the kept rows, the rows' counters add up
to the totals, and the totals (opens, writes, bytes_written) and job.files are the
workload's. The daemon's peak RSS (VmHWM) is printed and bounded generously (measured: about
85 MiB with the bound, 215 MiB when all 3,001 processes are kept). Then 20 small jobs removed
at once must cost a few state saves, not one each.
"""
import json
import os
import sys
import time

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

NPROCS = 3000
SIZE = 100
MAX_PROCS = 200
RSS_LIMIT_MIB = int(os.environ.get("IOLENS_E2E_RSS_LIMIT_MIB", "1024"))
SUMS = ("opens", "writes", "bytes_written")
N_SMALL = 20


def check_bounded(ck, where, doc, manifest, wpid):
    """The job's processes bounded, its totals the workload's."""
    procs = doc.get("processes") or []
    job = doc.get("job") or {}
    t = manifest["totals"]
    ck.check(len(procs) <= MAX_PROCS + 1, "%s lists %d processes, over the bound %d + 1" %
             (where, len(procs), MAX_PROCS))
    ck.eq("%s job.processes" % where, NPROCS + 1, job.get("processes"))
    rows = [p for p in procs if p.get("folded_processes") is None]
    other = [p for p in procs if p.get("folded_processes") is not None]
    ck.eq("%s '<other processes>' rows" % where, 1, len(other))
    ck.eq("%s job.folded_processes" % where, NPROCS + 1 - len(rows),
          job.get("folded_processes"))
    if other:
        ck.eq("%s <other processes>.folded_processes" % where, job.get("folded_processes"),
              other[0].get("folded_processes"))
        ck.eq("%s <other processes>.comm" % where, "<other processes>", other[0].get("comm"))
    ck.check(any(p.get("pid") == wpid for p in rows),
             "%s: the forking parent %d (alive until the end) is not kept" % (where, wpid))
    for k in SUMS:
        ck.eq("%s job.totals.%s" % (where, k), t[k], (job.get("totals") or {}).get(k))
        ck.eq("%s sum of the process rows' %s" % (where, k), t[k],
              sum((p.get("counters") or {}).get(k, 0) for p in procs))
    ck.eq("%s job.files" % where, NPROCS, job.get("files"))


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_forks")
    cg = D.Cgroups()
    data = D.tempdir("forks", base=os.environ.get("IOLENS_E2E_MANY_TMP", "/dev/shm"))
    rules = '  - cgroup: {paths: ["%s/frk/*"]}' % cg.prefix
    d = D.Daemon(args.iolensd, rules, tag="frk", iolens=args.iolens,
                 extra_config="limits:\n  max_processes_per_job: %d\n" % MAX_PROCS)
    d.start(ck)
    sub = "frk/storm"
    cg.mkdir(sub)
    job_id = "cgroup" + cg.rel(sub)
    d.wait_live(ck, [job_id])

    p = D.run_in_cgroup(cg.abs(sub), [args.workload, "forks", data, str(NPROCS), str(SIZE)])
    answered = 0
    t0 = time.monotonic()
    while p.poll() is None and time.monotonic() - t0 < 120:
        answered += d.status() is not None
        time.sleep(0.2)
    manifest = D.finish_workload(ck, p, "job_workload forks", timeout=60)
    if manifest is None:
        ck.finish()
    ck.check(answered > 0, "status never answered while the job forked")
    ck.eq("workload processes (its own count)", NPROCS, manifest["totals"]["processes"])
    # Every exit drained: the job is idle, its processes exited but for none.
    D.wait_or_fail(ck, "the job's processes drained", lambda: (
        (d.request({"cmd": "job", "id": job_id, "limit": 1}).get("result") or {})
        .get("job", {}).get("live_processes") == 0), 15)

    # The bound is applied at each drain (docs/daemon-config.md): the processes whose last exits
    # were just read fold at the drain that moves their records out of the kernel. Without the
    # bound the page would list all 3,001 for ever.
    def page_within_bound():
        r = d.request({"cmd": "job", "id": job_id, "limit": 1}).get("result") or {}
        n = (r.get("page") or {}).get("processes")
        return isinstance(n, int) and n <= MAX_PROCS + 1
    D.wait_or_fail(ck, "the job's processes folded within the bound", page_within_bound, 15, 0.2)
    # Every process has exited, but the drains may still be moving their last records out of the
    # kernel (CI once saw 10 files arrive between the page below and `iolens job`): two more
    # complete drains, after which the job no longer changes and the two answers must agree.
    base = d.status()["drain"]["count"]
    D.wait_or_fail(ck, "two drains after the fold", lambda: d.status()["drain"]["count"] >=
                   base + 2, 10)
    # A live job's `job` answers come from a snapshot reused for a second when young
    # (docs/control.md#live-jobs): the polls above made one, before those drains.
    time.sleep(1.1)

    a = d.request({"cmd": "job", "id": job_id})
    ck.check(a.get("ok"), "job answer: %s" % a)
    page = (a.get("result") or {}).get("page") or {}
    ck.check(len(a["result"].get("files", [])) <= 1000,
             "the default page holds %d files, over 1000" % len(a["result"].get("files", [])))
    ck.check(isinstance(page.get("processes"), int) and page["processes"] <= MAX_PROCS + 1,
             "page.processes is %r, over the bound %d + 1" % (page.get("processes"), MAX_PROCS))
    small = d.request({"cmd": "job", "id": job_id, "limit": 50}).get("result") or {}
    ck.check(len(small.get("files", [])) <= 50 and len(small.get("processes", [])) <= 50,
             "a page of limit 50 holds %d files and %d processes" %
             (len(small.get("files", [])), len(small.get("processes", []))))
    ck.eq("page of limit 50: next", 50, (small.get("page") or {}).get("next"))
    bad = d.request({"cmd": "job", "id": job_id, "limit": -1})
    ck.eq("limit -1: error code", "bad_request", bad.get("code"))

    cli = d.cli("job", job_id, "--json")
    ck.eq("iolens job --json exit code", 0, cli.returncode)
    live = json.loads(cli.stdout) if cli.returncode == 0 else {}
    ck.check("page" not in live, "iolens job --json left a `page` in the joined record")
    ck.eq("iolens job --json: files joined", page.get("files"), len(live.get("files", [])))
    check_bounded(ck, "live answer", live, manifest, p.pid)

    cg.rmdir(sub)
    doc = d.wait_record(ck, job_id, timeout=30)
    if doc is None or not D.check_record_shape(ck, doc, job_id):
        ck.finish()
    check_bounded(ck, "record", doc, manifest, p.pid)
    D.check_lost_zero(ck, doc, job_id)
    closed = d.request({"cmd": "job", "id": job_id, "limit": 50}).get("result") or {}
    ck.check(len(closed.get("files", [])) <= 50,
             "a closed job's page of limit 50 holds %d files" % len(closed.get("files", [])))
    ck.eq("closed job's page.processes", len(doc["processes"]),
          (closed.get("page") or {}).get("processes"))
    # cut from the compressed record (record_compression: zstd, the default), inflated in the loop
    ck.eq("closed job's page.by_file", len(doc.get("by_file", [])),
          (closed.get("page") or {}).get("by_file"))
    ck.check(len(doc.get("by_file", [])) > 0, "the record has no by_file rows")

    rss = D.read_rss_kib(d.proc.pid)
    D.log("iolensd RSS %d KiB, VmHWM %d KiB; status answered %d times while the job forked" %
          (rss[0], rss[1], answered))
    ck.check(rss[1] < RSS_LIMIT_MIB * 1024, "iolensd peak RSS (VmHWM) %d KiB is over %d MiB" %
             (rss[1], RSS_LIMIT_MIB))
    st = d.status() or {}
    ck.check((st.get("records") or {}).get("processes_folded", 0) >= NPROCS + 1 - MAX_PROCS - 1,
             "status records.processes_folded is %r" % (st.get("records") or {}).get(
                 "processes_folded"))
    check_closing_batched(ck, d, cg)
    rc, _ = d.stop()
    ck.eq("iolensd exit code", 0, rc)
    ck.finish()


def check_closing_batched(ck, d, cg):
    """Jobs that close together are saved together: 20 small jobs removed at once cost a few
    state saves (one per drain round that wrote some), not one each (a save costs as much as the
    whole state: one per job made closing 100 small jobs beside a big one take 16-23 s)."""
    subs = ["frk/small-%02d" % i for i in range(N_SMALL)]
    ids = ["cgroup" + cg.rel(s) for s in subs]
    for s in subs:
        cg.mkdir(s)
    d.wait_live(ck, ids, hooks=False)
    saves0 = ((d.status() or {}).get("state") or {}).get("saves", 0)
    for s in subs:
        cg.rmdir(s)
    for i in ids:
        d.wait_record(ck, i, timeout=30)
    saves = ((d.status() or {}).get("state") or {}).get("saves", 0) - saves0
    D.log("%d jobs closed together: %d state saves" % (N_SMALL, saves))
    ck.check(saves <= N_SMALL // 4, "closing %d jobs together took %d state saves (one per job?)"
             % (N_SMALL, saves))


if __name__ == "__main__":
    main()
