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
- the job's closed line (no `writing`) and its record hold the workload's totals exactly, with
  `lost` all zero, and `status` shows `output.writing` 0 and the state saved after the record.

The longest wait for an answer and the daemon's peak RSS are printed, not asserted (this is not
a benchmark; bench/README.md "The daemon's answers while it writes a record" has the figures).
"""
import os
import sys
import time

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

NFILES = 20000
SIZE = 100


def main():
    args = D.parse_args()
    D.require_root()
    ck = E.Checker("daemon_responsive")
    cg = D.Cgroups()
    data = D.tempdir("resp", base=os.environ.get("IOLENS_E2E_MANY_TMP", "/dev/shm"))
    rules = '  - cgroup: {paths: ["%s/resp/*"]}' % cg.prefix
    # Sized so that the burst of new files loses nothing (as daemon_limits), and no file folds.
    d = D.Daemon(args.iolensd, rules, args=["--max-files-per-job", str(2 * NFILES)], tag="resp",
                 extra_config="limits:\n  kernel_file_records: 262144\n  ring_size: 64MiB\n")
    d.start(ck)
    sub = "resp/big"
    cg.mkdir(sub)
    job_id = "cgroup" + cg.rel(sub)
    d.wait_live(ck, [job_id])
    p = D.run_in_cgroup(cg.abs(sub), [args.workload, "many", data, str(NFILES), str(SIZE)])
    manifest = D.finish_workload(ck, p, "job_workload many", timeout=120)
    if manifest is None:
        ck.finish()
    saves_before = (d.status() or {}).get("state", {}).get("saves")

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
            job_answers.append(d.request({"cmd": "job", "id": job_id, "limit": 1}))
        if state == "closed":
            closed_line = line
            break
    D.log("after the removal, %d answers to `jobs` in %.2f s, the longest %.3f s; the job "
          "listed writing in %d of them" % (len(seen), time.monotonic() - t0, longest,
                                            seen.count("writing")))
    ck.check("writing" in seen, "no answer came while the record was written (states seen: "
             "%s): the loop did not answer until the record was on disk" % sorted(set(map(str, seen))))
    ck.check(closed_line is not None, "the job was never listed closed within 120 s")
    for a in job_answers:
        # Written between the two requests, the job is answered whole; else refused, clearly.
        if a.get("ok"):
            ck.check(a["result"].get("job", {}).get("state") == "closed",
                     "`job` answered for a job not yet written: %s" % str(a)[:300])
        else:
            ck.check("being written" in a.get("error", ""), "`job` while writing: %s" % a)
    ck.check(job_answers, "`job` was never asked while the record was written")

    doc = d.wait_record(ck, job_id, timeout=60)
    if doc is None or not D.check_record_shape(ck, doc, job_id):
        ck.finish()
    t = manifest["totals"]
    mv = D.self_move_write(p.pid, cg.abs(sub))
    moved = [f for f in doc["files"] if f.get("path") == mv["path"]]
    extra = {k: (mv[k] if moved else 0) for k in ("opens", "reads", "writes", "bytes_read",
                                                   "bytes_written")}
    for k in ("opens", "reads", "writes", "bytes_read", "bytes_written"):
        ck.eq("record job.totals.%s (the workload's own count)" % k, t[k] + extra[k],
              doc["job"]["totals"].get(k))
        ck.eq("closed line totals.%s" % k, t[k] + extra[k],
              ((closed_line or {}).get("totals") or {}).get(k))
    ck.eq("record: distinct files", NFILES + len(moved), doc["job"].get("files"))
    ck.eq("record: file records (none folded)", NFILES + len(moved), len(doc["files"]))
    D.check_lost_zero(ck, doc, job_id)
    st = d.status() or {}
    ck.eq("status output.writing once written", 0, st.get("output", {}).get("writing"))
    ck.check(isinstance(saves_before, int) and st.get("state", {}).get("saves", 0) > saves_before,
             "the state was not saved after the record (saves %r -> %r)" %
             (saves_before, st.get("state", {}).get("saves")))
    rss = D.read_rss_kib(d.proc.pid)
    D.log("iolensd RSS %d KiB, VmHWM %d KiB" % rss)
    rc, _ = d.stop()
    ck.eq("iolensd exit code", 0, rc)
    ck.finish()


if __name__ == "__main__":
    main()
