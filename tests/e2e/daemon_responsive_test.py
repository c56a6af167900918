#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: iolensd keeps answering while it writes a big job's record (issue 16, item 3).

One job runs `job_workload many DIR 20000 100` on tmpfs: it creates 20,000 files with one
write of 100 bytes each, reads each back and unlinks it (ground truth: its own manifest). When
its cgroup is removed, the daemon hands the job to its record writer's thread, which builds and
writes the 20,000-file record (hundreds of MB of JSON) while the loop goes on. The test asks
`jobs` over the control socket as fast as it is answered, from the removal until the job is
listed closed, and checks:

- some answers came while the record was being written: the job listed with `writing: true`
  (the loop that wrote records itself answered nothing until the record was on disk);
- `job ID` asked meanwhile is refused with "being written", never answered from a half state;
- once written, `job ID` with "fd" hands the record over as a descriptor (its totals are the
  workload's), a page asked without "fd" of this 60 MB record is refused with the way to ask
  (the loop used to parse the whole record for each page), and `iolens job ID --json` prints
  the whole record;
- the job's closed line (no `writing`) and its record hold the workload's totals exactly, with
  `lost` all zero, and `status` shows `output.writing` 0.

Before these, `status`'s count of the kernel's files map (kept from the kernel's creation count,
not by walking the map: a walk is a syscall per record) is compared with bpftool's count of the
same pinned map, while a 2,000-file process is alive and after its exit while its final records
wait for a save.

Before the big job's cgroup is removed, while it is live with its 20,000 files, `iolens job
--json` joins its pages: one snapshot for all 100 pages (status `control.live_pages`), every file
once and the workload's totals; pages naming a snapshot not held are told to retry; a snapshot of
another job asked for right after a big one is told to retry after a time, which `iolens job`
waits out (docs/control.md#live-jobs).

Then a second job the same way, and iolensd is killed (SIGKILL) as soon as `jobs` lists it
writing, and restarted: the job is never lost (docs/daemon.md#restart-without-loss: a job whose
record is being written is in the saved state as closing, or still live in the state saved
before it closed). The restarted daemon writes its record, with the workload's totals exactly,
and `lost` zero; a second record of it is allowed only if the first was on disk before the kill
(the documented window between a record and the next save).

The longest wait for an answer and the daemon's peak RSS are printed, not asserted (this is not
a benchmark; bench/README.md "The daemon's answers while it writes a record" has the figures).
"""
import json
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

NFILES = 20000
SIZE = 100
COUNT_FILES = 2000
SHORT_JOBS = 12
SHORT_FILES = 5
LIVE_PAGE_ROWS = 200  # control::kLiveJobPageMax


def job_totals_check(ck, doc, manifest, pid, cg_abs, where, nfiles=NFILES):
    t, mv, moved = D.check_many_totals(ck, doc, manifest, pid, cg_abs, where, nfiles)
    ck.eq("%s: file records (none folded)" % where, nfiles + len(moved), len(doc["files"]))
    D.check_lost_zero(ck, doc, where)
    return t, mv, moved


def run_job(ck, d, cg, args, data, sub):
    """The workload run as job `sub` to its end (its cgroup still there): (job id, process,
    manifest); manifest None if it failed."""
    cg.mkdir(sub)
    job_id = "cgroup" + cg.rel(sub)
    d.wait_live(ck, [job_id])
    p = D.run_in_cgroup(cg.abs(sub), [args.workload, "many", data, str(NFILES), str(SIZE)])
    return job_id, p, D.finish_workload(ck, p, "job_workload many in " + sub, timeout=120)


def status_entries(d):
    st = d.status() or {}
    files = [m for m in st.get("maps", []) if m.get("name") == "files"]
    return (files[0].get("entries") if files else None), st.get("state", {}).get("saves")


def same_entries(ck, d, where):
    """`status` maps.files.entries (from the kernel's creation count, not a walk of the map)
    against bpftool's count of the same pinned map, at a moment no traced process runs. A save
    between the two reads deletes the final records it holds: then asked again."""
    for _ in range(5):
        got, saves = status_entries(d)
        t = time.monotonic()
        truth = d.kernel_map_entries("files")
        D.log("bpftool took %.2f s" % (time.monotonic() - t))
        if status_entries(d)[1] == saves:
            break
    D.log("%s: status says %s entries in the files map, bpftool counts %s" % (where, got, truth))
    ck.check(truth is not None, "%s: bpftool could not count the pinned files map" % where)
    ck.eq("%s: status maps.files.entries (bpftool's count of the map)" % where, truth, got)
    return truth


def wait_drains(ck, d, n):
    base = (d.status() or {}).get("drain", {}).get("count", 0)
    ck.check(D.wait_for("%d drains" % n,
                        lambda: (d.status() or {}).get("drain", {}).get("count", 0) >= base + n,
                        30), "iolensd did not complete %d drains within 30 s" % n)


def map_count(ck, d, cg, args, data):
    """`status` counts the files map without walking it (a walk is a syscall per record, and a
    status asked every 20 ms of a big job took the loop's time): its count is right while a
    process holds its records, and after its exit while the final records wait for a save."""
    sub = "resp/count"
    cg.mkdir(sub)
    job_id = "cgroup" + cg.rel(sub)
    d.wait_live(ck, [job_id])
    p = D.run_in_cgroup(cg.abs(sub), [args.workload, "many", data, str(COUNT_FILES), str(SIZE),
                                      "--gate-end"], stdin=subprocess.PIPE)
    D.read_json_line(ck, p, "job_workload many --gate-end", timeout=60)
    wait_drains(ck, d, 2)
    live = same_entries(ck, d, "process alive")
    ck.check(live is not None and live >= COUNT_FILES,
             "process alive: %s entries, fewer than its %d files" % (live, COUNT_FILES))
    p.stdin.write(b"\n")
    p.stdin.flush()
    D.finish_workload(ck, p, "job_workload many --gate-end", timeout=60)
    wait_drains(ck, d, 2)
    same_entries(ck, d, "process exited")
    cg.rmdir(sub)
    d.wait_record(ck, job_id, timeout=60)


def short_jobs_during_pieces(ck, d, cg, args, data):
    """A drain round over a big map goes in pieces, the loop answering between them
    (docs/daemon.md#responsiveness). A job closes in the middle of one: part of the map was read
    before its process exited, so it is written only after a round begun after its close. Short
    jobs, one after the other, while a live process holds NFILES records (each round then takes
    several pieces): every record holds exactly what its workload did."""
    hold = "resp/hold"
    cg.mkdir(hold)
    d.wait_live(ck, ["cgroup" + cg.rel(hold)])
    os.makedirs(data + "/hold")
    holder = D.run_in_cgroup(cg.abs(hold), [args.workload, "many", data + "/hold", str(NFILES),
                                            str(SIZE), "--gate-end"], stdin=subprocess.PIPE)
    D.read_json_line(ck, holder, "job_workload many --gate-end (holder)", timeout=120)
    wait_drains(ck, d, 2)
    most_pieces = 0
    jobs = []
    for i in range(SHORT_JOBS):
        sub = "resp/short%d" % i
        cg.mkdir(sub)
        job_id = "cgroup" + cg.rel(sub)
        d.wait_live(ck, [job_id])
        os.makedirs("%s/short%d" % (data, i))
        p = D.run_in_cgroup(cg.abs(sub), [args.workload, "many", "%s/short%d" % (data, i),
                                          str(SHORT_FILES), str(SIZE)])
        m = D.finish_workload(ck, p, "job_workload many in " + sub, timeout=60)
        cg.rmdir(sub)
        jobs.append((job_id, p.pid, cg.abs(sub), m))
        most_pieces = max(most_pieces, (d.status() or {}).get("drain", {}).get("last_pieces", 0))
    for job_id, pid, cg_abs, m in jobs:
        doc = d.wait_record(ck, job_id, timeout=60)
        if m is None or doc is None or not D.check_record_shape(ck, doc, job_id):
            continue
        job_totals_check(ck, doc, m, pid, cg_abs, job_id, nfiles=SHORT_FILES)
    D.log("drain rounds with a %d-record process alive: up to %d pieces" % (NFILES, most_pieces))
    # Else the rounds were whole and this tested nothing about pieces.
    ck.check(most_pieces >= 2, "no drain round went in pieces with %d records in the map (%d)"
             % (NFILES, most_pieces))
    holder.stdin.write(b"\n")
    holder.stdin.flush()
    D.finish_workload(ck, holder, "job_workload many --gate-end (holder)", timeout=60)
    cg.rmdir(hold)
    d.wait_record(ck, "cgroup" + cg.rel(hold), timeout=60)


def closed_job_record(ck, d, job_id, t, mv, moved):
    """A closed job's record is handed to the client as a descriptor (docs/control.md#job): the
    loop no longer parses a big record for each page (6 s a request for a 163 MB one, during
    which no other client was answered). Asked without "fd", a record this big is refused with
    the way to ask, not parsed."""
    path = [p for p, _ in d.records_of(job_id)]
    a, rec = d.closed_record(job_id)
    ck.check(a.get("ok"), "`job` of the closed job with fd: %s" % a)
    ck.eq("`job` with fd: the record's path", path[:1], [(a.get("result") or {}).get("record")])
    ck.eq("`job` with fd: its size", os.path.getsize(path[0]) if path else None,
          (a.get("result") or {}).get("bytes"))
    ck.check(rec is not None, "no descriptor came with the answer")
    if rec is not None:
        for k in ("opens", "reads", "writes", "bytes_read", "bytes_written"):
            ck.eq("record read through the descriptor: job.totals.%s" % k,
                  t[k] + (mv[k] if moved else 0), rec["job"]["totals"].get(k))
    bad = d.request({"cmd": "job", "id": job_id, "fd": "yes"})
    ck.eq("`job` with a non-boolean fd: error code", "bad_request", bad.get("code"))
    paged = d.request({"cmd": "job", "id": job_id, "limit": 1})
    ck.check(not paged.get("ok") and "fd" in paged.get("error", ""),
             "a page of a %s-byte record cut in the loop: %s" %
             (os.path.getsize(path[0]) if path else "?", str(paged)[:300]))
    # `iolens job` asks with fd and prints the whole record.
    cli = d.cli("job", job_id, "--json", timeout=120)
    ck.eq("iolens job --json exit code", 0, cli.returncode)
    if cli.returncode == 0:
        doc = json.loads(cli.stdout)
        ck.eq("iolens job --json: files", NFILES + len(moved), len(doc.get("files", [])))
        ck.eq("iolens job --json: job.totals.bytes_read", t["bytes_read"] +
              (mv["bytes_read"] if moved else 0), doc.get("job", {}).get("totals", {}).get("bytes_read"))
    else:
        D.log("iolens job stderr: %s" % cli.stderr[-500:])


def live_pages(d):
    return ((d.status() or {}).get("control") or {}).get("live_pages") or {}


def live_job_pages(ck, d, cg, sub, job_id, p, manifest):
    """A live job's `job` pages all come from one snapshot the loop takes for the first
    (docs/control.md#live-jobs): `iolens job --json` of the live 20,000-file job joins 100
    pages of 200 rows into the job at one moment (every file once, the workload's totals), and
    the loop took one snapshot for all of them (it took one a page before: 100 snapshots of the
    job). Pages naming a snapshot not held are told to retry from the start; a snapshot of
    another job asked for right after a big one is told to retry after a time (snapshots take at
    most 1/20 of the loop's time), which `iolens job` waits out."""
    wait_drains(ck, d, 2)  # the exited workload's last records have left the kernel
    idle = "resp/idle"
    cg.mkdir(idle)
    idle_id = "cgroup" + cg.rel(idle)
    d.wait_live(ck, [idle_id])
    before = live_pages(d)
    cli = d.cli("job", job_id, "--json", timeout=300)
    after = live_pages(d)
    ck.eq("iolens job --json of the live job: exit code", 0, cli.returncode)
    if cli.returncode != 0:
        D.log("iolens job stderr: %s" % cli.stderr[-500:])
        return
    doc = json.loads(cli.stdout)
    ck.eq("live job joined from its pages: job.state", "live", doc.get("job", {}).get("state"))
    ck.check("page" not in doc, "the joined pages still carry `page`: %s" % doc.get("page"))
    _, _, moved = job_totals_check(ck, doc, manifest, p.pid, cg.abs(sub),
                                   "live job joined from its pages")
    rows = NFILES + len(moved)
    ck.eq("live job joined: distinct (path, pid) rows", rows,
          len({(f.get("path"), f.get("pid")) for f in doc.get("files", [])}))
    ck.eq("live job joined: by_file rows (one per file)", rows, len(doc.get("by_file", [])))
    pages = -(-rows // LIVE_PAGE_ROWS)
    ck.eq("snapshots the loop took for the %d pages" % pages, 1,
          after.get("snapshots", 0) - before.get("snapshots", 0))
    ck.eq("pages answered from the held snapshot", pages - 1,
          after.get("pages_held", 0) - before.get("pages_held", 0))
    ck.check(after.get("held_rows", 0) >= rows, "status control.live_pages.held_rows %s, fewer "
             "than the job's %d rows" % (after.get("held_rows"), rows))

    gone = d.request({"cmd": "job", "id": job_id, "offset": 200, "snapshot": 1 << 40})
    ck.eq("a page of a snapshot not held: code", "retry", gone.get("code"))
    ck.check("ask again from offset 0" in gone.get("error", "") and
             "retry_after_ms" not in gone, "a page of a snapshot not held: %s" % gone)

    # The idle job's snapshot (tiny), then the big job's afresh: the next of the idle job must
    # wait 19 times what the big one took. (Each sequence starts once the last snapshot's
    # budget is spent: 20 times what it took.)
    def settle():  # the budget (20 times the last snapshot) and the 1 s a paged one is kept
        time.sleep(max(20 * (live_pages(d).get("last_snapshot_ms", 0) + 1), 1000) / 1000 + 0.05)
    settle()
    idle_page = d.request({"cmd": "job", "id": idle_id})
    ck.check(idle_page.get("ok"), "`job` of the idle job: %s" % idle_page)
    settle()
    taken = live_pages(d).get("snapshots", 0)
    big = d.request({"cmd": "job", "id": job_id, "limit": 1})
    busy = d.request({"cmd": "job", "id": idle_id})
    took_ms = live_pages(d).get("last_snapshot_ms", 0)
    ck.eq("`job` of the big job after the idle job's: snapshots taken", 1,
          live_pages(d).get("snapshots", 0) - taken)
    ck.check(big.get("ok") and big["result"]["page"]["snapshot"] >
             ((idle_page.get("result") or {}).get("page") or {}).get("snapshot", 0),
             "`job` of the big job after the idle job's: its snapshot's serial does not count "
             "up: %s" % str(big)[:300])
    ck.eq("`job` of another job right after a big snapshot: code", "retry", busy.get("code"))
    wait = busy.get("retry_after_ms", 0)
    ck.check(0 < wait <= 19 * (took_ms + 1), "retry_after_ms %s for a snapshot of %s ms" %
             (wait, took_ms))
    D.log("a snapshot of the live %d-file job took %s ms; the next job's wait %s ms" %
          (rows, took_ms, wait))
    # `iolens job` told so waits and asks again.
    settle()
    ck.check(d.request({"cmd": "job", "id": idle_id}).get("ok"), "`job` of the idle job")
    settle()
    ck.check(d.request({"cmd": "job", "id": job_id, "limit": 1}).get("ok"), "`job` of the big job")
    cli = d.cli("job", idle_id, "--json", timeout=60)
    ck.eq("iolens job of the idle job, made to wait: exit code", 0, cli.returncode)
    ck.check("waiting" in cli.stderr, "iolens job did not say it waited: %s" % cli.stderr[-300:])
    ck.eq("iolens job of the idle job, made to wait: its id", idle_id,
          (json.loads(cli.stdout or "{}").get("job") or {}).get("id"))
    ck.eq("status control.live_pages.retry_busy: the refusals", 2,
          live_pages(d).get("retry_busy", 0) - before.get("retry_busy", 0))
    # The big job's snapshot held last: let go when the job closes (checked in main).
    settle()
    ck.check(d.request({"cmd": "job", "id": job_id, "limit": 1}).get("ok"), "`job` of the big job")
    ck.check(live_pages(d).get("held_rows", 0) >= rows, "the big job's snapshot is not held: %s"
             % live_pages(d))
    cg.rmdir(idle)
    d.wait_record(ck, idle_id, timeout=60)
    ck.check(live_pages(d).get("held_rows", 0) >= rows, "the big job's snapshot was let go when "
             "another job closed: %s" % live_pages(d))


def kill_while_writing(ck, d, cg, args, data):
    sub = "resp/killed"
    job_id, p, manifest = run_job(ck, d, cg, args, data, sub)
    if manifest is None:
        return
    cg.rmdir(sub)
    t0 = time.monotonic()
    writing = False
    while not writing and time.monotonic() - t0 < 60:
        lines = [j for j in (d.request({"cmd": "jobs"}).get("result") or {}).get("jobs", [])
                 if j.get("id") == job_id]
        writing = bool(lines and lines[-1].get("writing"))
    killed_at = time.time()
    d.kill9()
    ck.check(writing, "job %s was never listed writing" % job_id)
    on_disk = [p for p, _ in d.records_of(job_id)]
    D.log("killed while writing the record of %s (%d record(s) on disk then)" %
          (job_id, len(on_disk)))
    d.restart(ck)
    # Not d.wait_record: a second record is allowed here (checked below).
    if not D.wait_or_fail(ck, "a record of %s after the restart" % job_id,
                          lambda: d.records_of(job_id), 60):
        return
    # The restarted daemon settled: a record it writes is submitted after a complete drain
    # round (write_closed) and then written by its writer thread. Two rounds that begin after
    # the record appeared, with no record being written then and the job not held (listed
    # closed, or not at all), leave no room for another record of it.
    base = drain_count(d)
    D.wait_or_fail(ck, "the restarted daemon settled (drain.count >= %d, output.writing 0, "
                   "%s not held)" % (base + 2, job_id),
                   lambda: settled_after(d, job_id, base + 2), 60)
    got = d.records_of(job_id)
    if len(got) > 1:
        first = min(os.path.getmtime(p) for p, _ in got)
        ck.check(first <= killed_at, "job %s has %d records, the first written after the kill "
                 "(%s): written twice" % (job_id, len(got), [p for p, _ in got]))
    for path, doc in got:
        if D.check_record_shape(ck, doc, job_id):
            job_totals_check(ck, doc, manifest, p.pid, cg.abs(sub),
                             "record after the kill (%s)" % os.path.basename(path))


def drain_count(d):
    """status drain.count, from an answer the loop built after this request came."""
    return ((d.status() or {}).get("drain") or {}).get("count", 0)


def settled_after(d, job_id, rounds):
    st = d.status() or {}
    if (st.get("drain") or {}).get("count", 0) < rounds or \
            (st.get("output") or {}).get("writing") != 0:
        return False
    lines = [j for j in (d.request({"cmd": "jobs"}).get("result") or {}).get("jobs", [])
             if j.get("id") == job_id]
    # Listed closed once this daemon wrote it; not at all if it never knew the job (its record
    # and a state without it were saved before the kill). Never live, closing or writing.
    return all(j.get("state") == "closed" and not j.get("writing") for j in lines)


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_responsive")
    cg = D.Cgroups()
    data = D.tempdir("resp", base=os.environ.get("IOLENS_E2E_MANY_TMP", "/dev/shm"))
    rules = '  - cgroup: {paths: ["%s/resp/*"]}' % cg.prefix
    # Sized so that the burst of new files loses nothing (as daemon_limits), and no file folds.
    # Pieces of 5 ms: a round over NFILES records goes in several on any machine.
    d = D.Daemon(args.iolensd, rules, args=["--max-files-per-job", str(2 * NFILES)], tag="resp",
                 iolens=args.iolens,
                 extra_config="drain_piece: 5ms\nlimits:\n  kernel_file_records: 262144\n"
                              "  ring_size: 64MiB\n")
    d.start(ck)
    map_count(ck, d, cg, args, data)
    short_jobs_during_pieces(ck, d, cg, args, data)
    sub = "resp/big"
    job_id, p, manifest = run_job(ck, d, cg, args, data, sub)
    if manifest is None:
        ck.finish()

    live_job_pages(ck, d, cg, sub, job_id, p, manifest)
    cg.rmdir(sub)
    t0 = time.monotonic()
    seen = []        # the job's line in each answer: "live", "writing", "closed", or None
    job_answers = []  # answers to `job ID` asked while it was listed writing
    longest = 0.0
    closed_line = None
    while time.monotonic() - t0 < 120:
        t = time.monotonic()
        a = d.request({"cmd": "jobs"})
        longest = max(longest, time.monotonic() - t)
        lines = [j for j in (a.get("result") or {}).get("jobs", []) if j.get("id") == job_id]
        line = lines[-1] if lines else None
        state = None if line is None else "writing" if line.get("writing") else line.get("state")
        seen.append(state)
        if state == "writing" and len(job_answers) < 3:
            job_answers.append(d.closed_record(job_id))
        if state == "closed":
            closed_line = line
            break
    D.log("after the removal, %d answers to `jobs` in %.2f s, the longest %.3f s; the job "
          "listed writing in %d of them" % (len(seen), time.monotonic() - t0, longest,
                                            seen.count("writing")))
    ck.check("writing" in seen, "no answer came while the record was written (states seen: "
             "%s): the loop did not answer until the record was on disk" % sorted(set(map(str, seen))))
    ck.check(closed_line is not None, "the job was never listed closed within 120 s")
    for a, rec in job_answers:
        # Written between the two requests, the record is handed over whole; else refused,
        # clearly.
        if a.get("ok"):
            ck.check(rec is not None and rec.get("job", {}).get("state") == "closed",
                     "`job` answered for a job not yet written: %s" % str(a)[:300])
        else:
            ck.check("being written" in a.get("error", "") and a.get("code") == "retry" and
                     a.get("retry_after_ms") == 500, "`job` while writing: %s" % a)
    ck.check(job_answers, "`job` was never asked while the record was written")

    doc = d.wait_record(ck, job_id, timeout=60)
    if doc is None or not D.check_record_shape(ck, doc, job_id):
        ck.finish()
    t, mv, moved = job_totals_check(ck, doc, manifest, p.pid, cg.abs(sub), "record")
    for k in ("opens", "reads", "writes", "bytes_read", "bytes_written"):
        ck.eq("closed line totals.%s" % k, t[k] + (mv[k] if moved else 0),
              ((closed_line or {}).get("totals") or {}).get(k))
    st = d.status() or {}
    ck.eq("status output.writing once written", 0, st.get("output", {}).get("writing"))
    ck.eq("status control.live_pages.held_rows once the job closed (its snapshot let go)", 0,
          st.get("control", {}).get("live_pages", {}).get("held_rows"))
    closed_job_record(ck, d, job_id, t, mv, moved)
    rss = D.read_rss_kib(d.proc.pid)
    D.log("iolensd RSS %d KiB, VmHWM %d KiB" % rss)

    kill_while_writing(ck, d, cg, args, data)
    rc, _ = d.stop()
    ck.eq("iolensd exit code", 0, rc)
    ck.finish()


if __name__ == "__main__":
    main()
