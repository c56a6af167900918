#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: thousands of short jobs in a row: each recorded exactly, and iolensd's descriptors do
not grow with them, nor its memory past a slack.

A cgroup rule P/mj/*, `metrics.max_jobs: 100`, `grace_period: 1h` (no ended job's series
expire during the test: every one past the 100 newest is evicted). ROUNDS rounds of PER_ROUND jobs, one after the other: `job_workload burst` makes the job's
cgroup, moves itself in, writes W bytes to one file (W different per job) and exits; the test
removes the cgroup. After each round the test waits until every job of the round has its record.

Checks:
  - every job has exactly one record, closed, whose one file has exactly the workload's own
    opens, writes, bytes and closes (its manifest), and whose lost counts are zero;
  - iolensd's open descriptors after the last round are those after the first, give or take
    FD_SLACK open for a moment (nothing leaks per job), and its resident memory grew by less than RSS_SLACK_KIB between them (ended
    jobs' metrics, which held ~8 KiB a job for the grace period, are kept for at most
    metrics.max_jobs jobs);
  - status: jobs.closed = the jobs, metrics.jobs_retained = 100, metrics.jobs_evicted = the
    jobs - 100, and /metrics says the same
    (iolens_metrics_ended_jobs_evicted_total);
  - the node's lost counts stay zero.
The daemon's CPU per job is logged (bench/README.md "Thousands of short jobs" has the figures).
"""
import json
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

ROUNDS = 3
PER_ROUND = 500
MAX_JOBS = 100
RSS_SLACK_KIB = 32 * 1024
FD_SLACK = 3


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_many_jobs")
    cg = D.Cgroups()
    work = D.tempdir("mj-work")
    d = D.Daemon(args.iolensd, '  - cgroup: {paths: ["%s/mj/*"]}' % cg.prefix, tag="mj",
                 extra_config='grace_period: 1h\nmetrics:\n  listen: "127.0.0.1:0"\n'
                              '  max_jobs: %d\n' % MAX_JOBS)
    d.start(ck)
    cg.mkdir("mj")
    pid = d.proc.pid
    jobs = {}  # job id -> (manifest, W)
    seen = []  # (fds, rss KiB) after each round
    cpu0 = D.cpu_seconds(pid)
    t0 = time.monotonic()
    try:
        n = 0
        for rnd in range(ROUNDS):
            for _ in range(PER_ROUND):
                name = "j%d" % n
                wbytes = 1000 + 7 * n
                n += 1
                sub = cg.abs("mj/" + name)
                cg.created.append(sub)
                p = subprocess.run([args.workload, "burst", sub, work, name, str(wbytes)],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, timeout=30)
                if p.returncode != 0:
                    ck.fatal("%s: job_workload exited %d: %s" % (name, p.returncode,
                                                                  p.stderr.decode()))
                os.rmdir(sub)
                jobs["cgroup" + cg.rel("mj/" + name)] = (json.loads(p.stdout.decode()), wbytes)
            D.wait_or_fail(ck, "round %d: %d records" % (rnd, n),
                           lambda: len(d.record_files()) >= n, 120, interval=0.2)
            D.wait_or_fail(ck, "round %d: nothing being written" % rnd,
                           lambda: (d.status() or {}).get("output", {}).get("writing") == 0, 30)
            fds = len(os.listdir("/proc/%d/fd" % pid))
            rss = D.read_rss_kib(pid)[0]
            seen.append((fds, rss))
            D.log("round %d: %d jobs in %.1f s; iolensd fds %d, rss %d KiB, cpu %.2f s" %
                  (rnd, n, time.monotonic() - t0, fds, rss, D.cpu_seconds(pid) - cpu0))
        cpu = D.cpu_seconds(pid) - cpu0
        D.log("iolensd: %.2f ms of CPU a job (%d jobs)" % (cpu * 1000 / n, n))

        # Every job, exactly once, exact.
        by_job = {}
        for path, doc in d.records().items():
            by_job.setdefault(doc.get("job", {}).get("id"), []).append((path, doc))
        for job_id, (manifest, wbytes) in sorted(jobs.items()):
            got = by_job.get(job_id, [])
            if not ck.check(len(got) == 1, "%s: %d records" % (job_id, len(got))):
                continue
            doc = got[0][1]
            ck.eq("%s state" % job_id, "closed", doc["job"].get("state"))
            ck.eq("%s bytes (the workload's W)" % job_id, wbytes,
                  manifest["totals"]["bytes_written"])
            D.check_manifest_files(ck, doc, [manifest], job_id,
                                   moves=[(manifest["pid"], cg.abs("mj/" + job_id.rsplit("/", 1)[1]))])
            D.check_lost_zero(ck, doc, job_id)
        ck.eq("records of other jobs", [], sorted(set(by_job) - set(jobs)))

        (fds1, rss1), (fdsN, rssN) = seen[0], seen[-1]
        # A few are open only for a moment (a record's or the state's temporary, a scrape's
        # connection): a leak would be one or more a job, a thousand here.
        ck.check(fdsN <= fds1 + FD_SLACK,
                 "iolensd's descriptors grew from %d after the first round to %d after the last "
                 "(%d jobs between; slack %d)" % (fds1, fdsN, (ROUNDS - 1) * PER_ROUND, FD_SLACK))
        ck.check(rssN - rss1 < RSS_SLACK_KIB,
                 "iolensd's RSS grew by %d KiB over %d jobs (rounds 2..%d), limit %d KiB" %
                 (rssN - rss1, (ROUNDS - 1) * PER_ROUND, ROUNDS, RSS_SLACK_KIB))

        st = d.status()
        total = ROUNDS * PER_ROUND
        ck.eq("status jobs.closed", total, st["jobs"].get("closed"))
        ck.eq("status metrics.jobs_retained", MAX_JOBS, st["metrics"].get("jobs_retained"))
        ck.eq("status metrics.jobs_evicted", total - MAX_JOBS, st["metrics"].get("jobs_evicted"))
        got = None
        deadline = time.monotonic() + 5  # the page is rebuilt at most once a second
        while time.monotonic() < deadline:
            got = D.node_metric(ck, d, "iolens_metrics_ended_jobs_evicted_total")
            if got == total - MAX_JOBS:
                break
            time.sleep(0.2)
        ck.eq("iolens_metrics_ended_jobs_evicted_total", total - MAX_JOBS, got)
        D.stop_checked(ck, d, node_lost_zero=True)
    finally:
        cg.remove_all()
    return ck.finish()


if __name__ == "__main__":
    sys.exit(main())
