#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""iolensd's log shows hostile names escaped (control/log_escape.hpp, docs/daemon.md#logs).

A local user who may create cgroups under a watched root names one with a terminal escape
(ESC [31m: red from there on) and U+202E (right-to-left override: the rest of the line is shown
reversed). The daemon logs the job it opens for that cgroup; the log (its stderr, which systemd
sends to the journal) must show both as visible escapes (\\x1b, \\u202e) and must not hold the
raw ESC byte or the raw UTF-8 of U+202E anywhere.
"""
import os
import sys

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

log = E.log

# The cgroup's name: ESC [31m, then U+202E, then text that would be shown reversed.
HOSTILE = "job-\x1b[31mred\u202egpj.exe"
# How the log must show it: terminal_safe's escapes.
SHOWN = b"job-\\x1b[31mred\\u202egpj.exe"


def log_bytes(d):
    with open(d.log_path, "rb") as f:
        return f.read()


def main():
    args = D.parse_args(workload=False)
    D.require_root()
    ck = E.Checker("daemon_log_escape")
    cg = D.Cgroups()
    cg.mkdir("")
    rules = '  - cgroup: {paths: ["%s/*"]}' % cg.rel()
    d = D.Daemon(args.iolensd, rules=rules, tag="logesc")
    d.start(ck)
    job_dir = cg.mkdir(HOSTILE)
    ck.check(os.path.isdir(job_dir), "the cgroup %r was not created" % HOSTILE)
    # A process in it, so that the job is opened whatever the rule's trigger is.
    p = D.run_in_cgroup(job_dir, ["/bin/sleep", "30"])
    D.Cleanup.register("kill the job's sleep", p.kill)
    # "gpj.exe" is plain text: the line is there, escaped or not.
    got = D.wait_for("the job's log line",
                     lambda: any(b"opened" in ln and b"gpj.exe" in ln
                                 for ln in log_bytes(d).split(b"\n")), 10)
    p.kill()
    p.wait()
    rc, _ = d.stop()
    ck.eq("iolensd exit status", 0, rc)
    data = log_bytes(d)
    lines = [ln for ln in data.split(b"\n") if SHOWN in ln]
    log("log lines with the escaped name: %d, e.g. %r" % (len(lines), lines[:1]))
    ck.check(got, "no 'opened' line for the job within 10 s")
    ck.check(lines, "no log line shows the name escaped as %r; log:\n%r" %
             (SHOWN, data[-3000:]))
    ck.check(any(b"opened" in ln for ln in lines),
             "the job's 'opened' line does not show the escaped name: %r" % lines)
    ck.eq("raw ESC bytes in the log", 0, data.count(b"\x1b"))
    ck.eq("raw U+202E in the log", 0, data.count("\u202e".encode()))
    ck.finish()


if __name__ == "__main__":
    main()
