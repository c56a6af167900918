#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""unit: `iolens job ID` against a scripted daemon (docs/control.md#live-jobs), no root.

A fake iolensd on a Unix socket answers each request from a script and logs it. Checked:
- a live job's pages are asked with the snapshot the first page names, and joined (no `page`
  left; the snapshot's `age_ms` when its last page was cut kept);
- a page of a snapshot no longer held ("retry", no time) makes the client start again from the
  first page, and the output is the new snapshot's rows only;
- "retry" with `retry_after_ms` is waited out (said on stderr) and asked again;
- a job that closes while its pages are read (the daemon says its record is being written,
  then hands the record's descriptor over) makes the client wait, start again and print the
  record;
- a snapshot gone at every try ends in an error after four tries, exit 1.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("MISMATCH: " + what, flush=True)


class FakeDaemon:
    """Answers request i with script[i] (a function of the request: (answer, fd or None))."""

    def __init__(self, path, script):
        self.path, self.script, self.requests = path, script, []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(8)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                line = b""
                while not line.endswith(b"\n"):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    line += chunk
                req = json.loads(line)
                self.requests.append(req)
                i = len(self.requests) - 1
                answer, fd = (self.script[i](req) if i < len(self.script) else
                              ({"ok": False, "code": "failed", "error": "script ended"}, None))
                data = (json.dumps(answer) + "\n").encode()
                if fd is not None:
                    socket.send_fds(conn, [data[:1]], [fd])
                    conn.sendall(data[1:])
                    os.close(fd)
                else:
                    conn.sendall(data)

    def close(self):
        self.sock.close()


def page(snapshot, files, offset, nxt, age_ms=5):
    return ({"ok": True, "result": {
        "schema": "iolens.job/1", "job": {"id": "k8s/p", "state": "live"},
        "processes": [{"pid": 7}] if offset == 0 else [], "files": [{"path": f} for f in files],
        "by_file": [{"path": f} for f in files],
        "page": {"offset": offset, "limit": 2, "processes": 1, "files": 3, "by_file": 3,
                 "next": nxt, "snapshot": snapshot, "age_ms": age_ms}}}, None)


GONE = ({"ok": False, "code": "retry", "error": "the snapshot of job k8s/p that these pages come "
         "from is no longer held: ask again from offset 0"}, None)


def run(iolens, script, extra=()):
    with tempfile.TemporaryDirectory(prefix="iolens-cli-pages-") as d:
        path = os.path.join(d, "sock")
        fake = FakeDaemon(path, script)
        t = time.monotonic()
        try:
            r = subprocess.run([iolens, "job", "k8s/p", "--json", "--socket", path] + list(extra),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=60)
        finally:
            took = time.monotonic() - t
            fake.close()
    return r, fake.requests, took


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iolens", required=True)
    a = ap.parse_args()

    # A snapshot gone after the first page: from the start, the new snapshot's rows only.
    r, reqs, _ = run(a.iolens, [
        lambda q: page(5, ["/a0", "/a1"], 0, 2),
        lambda q: GONE,
        lambda q: page(6, ["/b0", "/b1"], 0, 2, age_ms=1500),
        lambda q: page(6, ["/b2"], 2, None, age_ms=1501),
    ])
    check(r.returncode == 0, "gone, then joined: exit %d, stderr %s" % (r.returncode, r.stderr))
    doc = json.loads(r.stdout or "{}")
    check([f["path"] for f in doc.get("files", [])] == ["/b0", "/b1", "/b2"],
          "gone, then joined: files %s" % doc.get("files"))
    check([f["path"] for f in doc.get("by_file", [])] == ["/b0", "/b1", "/b2"],
          "gone, then joined: by_file %s" % doc.get("by_file"))
    # how old the snapshot was when its last page was cut
    check("page" not in doc and doc.get("age_ms") == 1501,
          "gone, then joined: page %s, age_ms %s" % (doc.get("page"), doc.get("age_ms")))
    check([(q.get("offset"), q.get("snapshot"), q.get("fd")) for q in reqs] ==
          [(None, None, True), (2, 5, True), (None, None, True), (2, 6, True)],
          "gone, then joined: requests %s" % reqs)

    # "retry" with a time: waited out, said once on stderr.
    r, reqs, took = run(a.iolens, [
        lambda q: ({"ok": False, "code": "retry", "error": "iolensd took a snapshot: ask again "
                    "in 300 ms", "retry_after_ms": 300}, None),
        lambda q: page(9, ["/c0", "/c1"], 0, 2),
        lambda q: page(9, ["/c2"], 2, None),
    ])
    check(r.returncode == 0, "retry after 300 ms: exit %d, stderr %s" % (r.returncode, r.stderr))
    check("waiting" in r.stderr and "ask again in 300 ms" in r.stderr,
          "retry after 300 ms: stderr %r" % r.stderr)
    check(took >= 0.3, "retry after 300 ms: the client asked again after %.3f s" % took)
    check(len(reqs) == 3, "retry after 300 ms: %d requests" % len(reqs))

    # The job closes while its pages are read: the record is handed over, the client starts
    # again and prints the record.
    record = {"schema": "iolens.job/1", "job": {"id": "k8s/p", "state": "closed"},
              "files": [{"path": "/r0"}], "processes": []}
    tmp = tempfile.NamedTemporaryFile(prefix="iolens-cli-pages-", suffix=".json")
    tmp.write(json.dumps(record).encode())
    tmp.flush()

    def closed(q):
        # a descriptor of its own, from offset 0, as the daemon opens the record
        return ({"ok": True, "result": {"id": "k8s/p", "state": "closed", "record": "/x.json",
                                        "bytes": os.path.getsize(tmp.name)}},
                os.open(tmp.name, os.O_RDONLY))
    writing = ({"ok": False, "code": "retry", "error": "job k8s/p has ended and its record is "
                "being written: ask again once ...", "retry_after_ms": 200}, None)
    r, reqs, _ = run(a.iolens, [lambda q: page(3, ["/a0", "/a1"], 0, 2), lambda q: writing,
                                closed, closed])
    check(r.returncode == 0, "closed meanwhile: exit %d, stderr %s" % (r.returncode, r.stderr))
    check(json.loads(r.stdout or "{}") == record, "closed meanwhile: printed %s" % r.stdout[:300])
    check([(q.get("offset"), q.get("snapshot")) for q in reqs] ==
          [(None, None), (2, 3), (2, 3), (None, None)], "closed meanwhile: requests %s" % reqs)
    tmp.close()

    # Gone at every try: four tries, then an error.
    r, reqs, _ = run(a.iolens, [lambda q: page(1, ["/a0", "/a1"], 0, 2), lambda q: GONE] * 4)
    check(r.returncode == 1, "gone every time: exit %d" % r.returncode)
    check("could not be read from one snapshot of it in 4 tries" in r.stderr,
          "gone every time: stderr %r" % r.stderr)
    check(len(reqs) == 8, "gone every time: %d requests" % len(reqs))

    if FAILS:
        print("FAIL cli_job_pages: %d mismatch(es)" % len(FAILS))
        sys.exit(1)
    print("PASS cli_job_pages")


if __name__ == "__main__":
    main()
