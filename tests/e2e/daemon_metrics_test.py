#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: iolensd's Prometheus endpoint (docs/metrics.md), scraped by a real Prometheus server.

One daemon (top_files 5, grace_period 5s, node "e2e-node", classes `dataset` = W/data/ and
`checkpoint` = W/ckpt/, W a temp dir; a cgroup rule P/metrics/* with P = /iolens-e2e-<pid>) and
one Prometheus (/usr/bin/prometheus, Debian's `prometheus`) scraping it every second.

Job A (P/metrics/main) runs a small C program the test compiles statically (like
tests/workloads/job_workload: after exec it opens no file but those it is told to, so every
counter of the job is known). It is told: open, read, close 20 dataset files in 65,536-byte
reads (50 reads), 30 reads of 50 bytes and 10 of 4,000 bytes of two more dataset files; write the
checkpoint in 8 writes of 1 MiB and fsync it; write 12 MiB to a file named
`a"b\\c<newline>d<0xff>.bin` and read it back, in 1 MiB calls (the job's biggest file). Every call
is checked for a full return by the program; then it prints "done" and waits on stdin, so the job
stays live while Prometheus scrapes. From that list the test knows: bytes and calls per op, per
size bucket, per class; opens, closes, fsyncs; the files of each class.

Checked through Prometheus's HTTP API (values must converge within 30 s):
  - iolens_job_io_bytes_total / _io_operations_total (sum by op) = the job's exact totals, and
    the same on the device stat(2) gives for the work directory (iolens_job_device_*);
    the class families: `dataset` reads, `checkpoint` writes and the `other` file exactly;
    class files and class metadata operations (open + close + fsync) exactly;
  - iolens_job_request_size_bytes: every cumulative `le` bucket, _count and _sum, both ops;
  - iolens_job_request_duration_seconds_count (and its +Inf bucket) = the calls;
  - iolens_job_metadata_operations_total open/close/fsync; iolens_job_files;
  - iolens_job_file_not_aligned_operations_total = the calls at offsets that are no multiple of
    the file's alignment (Darshan's rule, computed here from the mount table), and
    iolens_job_mem_not_aligned_operations_total 0 (every buffer page-aligned);
  - rate() of the idle job's bytes: exactly 0 over a 5 s window of final samples, and over 1 m
    at most what the job's known bytes allow; iolens_job_info names the job (kind, cgroup,
    node);
  - iolens_build_info, iolens_map_fill_ratio (in [0, 1]) exist; iolens_lost_total all 0.
Hostile names: /metrics parses with a strict text-format parser (UTF-8, only \\\\ \\" \\n
escapes, no duplicate series); the hostile file is a top file whose path label reads `\\\\` for
its backslash and `\\xff` for the byte 0xff, and gives back the file's exact name; `up` is 1
and the target's lastError is empty.
Dashboard (--dashboard): every panel's every `expr`, with the template variables filled in, is
an instant query that succeeds and returns something for job A; a `job_id` variable exists.
Cardinality: job B (P/metrics/many) runs `job_workload many` on 100,000 files: at most K + 1 = 6
paths in iolens_job_top_file_io_bytes (one `<other>`) on the page and in Prometheus, and the
top-file bytes add up to the job's exact total.
Grace period: job A's workload exits and its cgroup is removed: its series stay, with
iolens_job_end_time_seconds and their final values, then disappear grace_period (5 s) after
the end time (not before, and not much later).
"""
import json
import math
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

PROMETHEUS = "/usr/bin/prometheus"
NODE = "e2e-node"
TOP_FILES = 5
GRACE_S = 5
MIB = 1 << 20
CONVERGE_S = 30
NMANY = int(os.environ.get("IOLENS_E2E_METRICS_MANY", "100000"))
MANY_SIZE = 100
# docs/metrics.md: the `le` bounds of iolens_job_request_size_bytes
SIZE_LE = (100, 1024, 10240, 102400, 1048576, 4194304, 10485760, 104857600, 1073741824)

# The workload: runs the operations given on its command line, every call checked for a full
# return, then prints "done" and waits for EOF on stdin. Linked statically: no loader, no
# libc.so, no locale files: the job does no file I/O but these operations.
#   r PATH REQ N : open O_RDONLY, N read()s of REQ bytes, close
#   w PATH REQ N S: open O_WRONLY|O_CREAT|O_TRUNC, N write()s of REQ bytes, fsync if S is 1, close
WORKLOAD_C = r'''
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char buf[1 << 20] __attribute__((aligned(4096))); /* no call's buffer misaligned */

static void die(const char *what, const char *path)
{
	fprintf(stderr, "metrics_workload: %s %s: %s\n", what, path, strerror(errno));
	exit(2);
}

int main(int argc, char **argv)
{
	memset(buf, 'm', sizeof(buf));
	for (int i = 1; i < argc;) {
		const char *op = argv[i], *path;
		long req, n;
		int w, fd;

		if (i + 3 >= argc || (strcmp(op, "r") && strcmp(op, "w")))
			return fprintf(stderr, "metrics_workload: bad arguments at %d\n", i), 2;
		w = !strcmp(op, "w");
		path = argv[i + 1];
		req = atol(argv[i + 2]);
		n = atol(argv[i + 3]);
		if (req <= 0 || req > (long)sizeof(buf) || n < 0)
			return fprintf(stderr, "metrics_workload: bad size at %d\n", i), 2;
		fd = w ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)
		       : open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			die("open", path);
		for (long k = 0; k < n; k++) {
			ssize_t got = w ? write(fd, buf, (size_t)req) : read(fd, buf, (size_t)req);

			if (got != req) {
				if (got >= 0)
					errno = EIO;
				die(w ? "write" : "read", path);
			}
		}
		if (w && !strcmp(argv[i + 4], "1") && fsync(fd) != 0)
			die("fsync", path);
		if (close(fd) != 0)
			die("close", path);
		i += w ? 5 : 4;
	}
	/* write(2), not stdio: stdio would fstat() stdout, a metadata call the test would have to
	 * guess. Stdout is a pipe: not file I/O. */
	char done[32];
	int len = snprintf(done, sizeof(done), "done %d\n", (int)getpid());

	if (write(1, done, (size_t)len) != len)
		return 2;
	while (read(0, buf, sizeof(buf)) > 0)
		;
	return 0;
}
'''

# The fields of the hostile name: a double quote, a backslash, a newline, a byte 0xff.
HOSTILE_NAME = b'a"b\\c\nd\xff.bin'
# ... as the `path` label's value must read once unescaped (docs/metrics.md#conventions): the
# backslash doubled, 0xff as `\xff`.
HOSTILE_LABEL = 'a"b\\\\c\nd\\xff.bin'


def name_of_label(value):
    """The file name's bytes back from a label value, by docs/metrics.md#conventions: two
    backslashes are one, backslash-x-NN is the byte NN."""
    out, i = bytearray(), 0
    while i < len(value):
        if value.startswith("\\\\", i):
            out += b"\\"
            i += 2
        elif value.startswith("\\x", i):
            out.append(int(value[i + 2:i + 4], 16))
            i += 4
        else:
            out += value[i].encode()
            i += 1
    return bytes(out)


assert name_of_label(HOSTILE_LABEL) == HOSTILE_NAME


# --- the text exposition format -----------------------------------------------------------------

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LNAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_TYPES = ("counter", "gauge", "histogram", "summary", "untyped")


class ParseError(Exception):
    pass


def _parse_value(s, lineno):
    if s in ("NaN", "+Inf", "-Inf", "Inf"):
        return float(s.replace("Inf", "inf").replace("NaN", "nan"))
    if not re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", s):
        raise ParseError("line %d: bad value %r" % (lineno, s))
    return float(s)


def parse_exposition(raw):
    """Strict parser of the Prometheus text format 0.0.4: returns [(name, {label: value},
    value)] or raises ParseError naming the line. The page must be valid UTF-8; label values
    may hold only the escapes \\\\, \\" and \\n; every series appears once."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ParseError("not valid UTF-8: %s (bytes %r)" % (e, raw[max(0, e.start - 40):
                                                                     e.end + 40]))
    if text and not text.endswith("\n"):
        raise ParseError("the page does not end with a newline")
    samples, seen, types = [], set(), {}
    for lineno, line in enumerate(text.split("\n")[:-1] if text else [], 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            m = re.match(r"# (HELP|TYPE) (\S+) ?(.*)$", line)
            if not m:
                continue  # a plain comment
            if not _NAME.fullmatch(m.group(2)):
                raise ParseError("line %d: bad metric name %r" % (lineno, m.group(2)))
            if m.group(1) == "TYPE":
                if m.group(3) not in _TYPES:
                    raise ParseError("line %d: bad type %r" % (lineno, m.group(3)))
                if m.group(2) in types:
                    raise ParseError("line %d: second TYPE line for %s" % (lineno, m.group(2)))
                types[m.group(2)] = m.group(3)
            elif not re.fullmatch(r"(?:[^\\]|\\[\\n])*", m.group(3)):
                raise ParseError("line %d: bad escape in HELP %r" % (lineno, m.group(3)))
            continue
        m = _NAME.match(line)
        if not m:
            raise ParseError("line %d: no metric name: %r" % (lineno, line))
        name, i, labels = m.group(0), m.end(), {}
        if i < len(line) and line[i] == "{":
            i += 1
            while True:
                if line[i:i + 1] == "}":
                    i += 1
                    break
                lm = _LNAME.match(line, i)
                if not lm:
                    raise ParseError("line %d: bad label name at column %d: %r" %
                                     (lineno, i + 1, line))
                lname = lm.group(0)
                i = lm.end()
                if line[i:i + 2] != '="':
                    raise ParseError("line %d: expected =\" after label %s: %r" %
                                     (lineno, lname, line))
                i += 2
                val = []
                while True:
                    if i >= len(line):
                        raise ParseError("line %d: unterminated value of label %s: %r" %
                                         (lineno, lname, line))
                    c = line[i]
                    if c == '"':
                        i += 1
                        break
                    if c == "\\":
                        nxt = line[i + 1:i + 2]
                        if nxt not in ("\\", '"', "n"):
                            raise ParseError("line %d: escape \\%s in the value of label %s "
                                             "(only \\\\, \\\" and \\n are allowed): %r" %
                                             (lineno, nxt, lname, line))
                        val.append("\n" if nxt == "n" else nxt)
                        i += 2
                        continue
                    val.append(c)
                    i += 1
                if lname in labels:
                    raise ParseError("line %d: label %s twice" % (lineno, lname))
                labels[lname] = "".join(val)
                if line[i:i + 1] == ",":
                    i += 1
                elif line[i:i + 1] != "}":
                    raise ParseError("line %d: expected , or } at column %d: %r" %
                                     (lineno, i + 1, line))
        if line[i:i + 1] != " ":
            raise ParseError("line %d: expected a space before the value: %r" % (lineno, line))
        rest = line[i + 1:].split(" ")
        if len(rest) not in (1, 2) or (len(rest) == 2 and not re.fullmatch(r"-?\d+", rest[1])):
            raise ParseError("line %d: bad value/timestamp %r" % (lineno, line[i + 1:]))
        value = _parse_value(rest[0], lineno)
        key = (name, tuple(sorted(labels.items())))
        if key in seen:
            raise ParseError("line %d: duplicate series %s%s" % (lineno, name, labels))
        seen.add(key)
        samples.append((name, labels, value))
    return samples


def self_test_parser(ck):
    """The parser must accept a page with hostile values and refuse the broken ones (a parser
    that accepts everything would make the checks below pointless)."""
    good = ('# HELP iolens_x A help \\\\ with \\n escapes\n# TYPE iolens_x gauge\n'
            'iolens_x{path="/d/a\\"b\\\\c\\nd\\\\xff.bin",op="read"} 12\n'
            'iolens_x{path="<other>",op="read",} 1.5e+06\n'
            'iolens_y_bucket{le="+Inf"} +Inf\n\n'
            'iolens_z NaN 1700000000000\n').encode()
    try:
        s = parse_exposition(good)
        ck.eq("parser self-test: hostile path", "/d/a\"b\\c\nd\\xff.bin", s[0][1].get("path"))
        ck.eq("parser self-test: series", 4, len(s))
    except ParseError as e:
        ck.fail("parser self-test: a valid page refused: %s" % e)
    bad = {
        "raw 0xff": b'iolens_x{path="/d/\xff"} 1\n',
        "escape \\x": b'iolens_x{path="/d/\\xff"} 1\n',
        "raw quote": b'iolens_x{path="/d/a"b"} 1\n',
        "newline in a value": b'iolens_x{path="/d/a\nb"} 1\n',
        "duplicate": b'iolens_x{a="1"} 1\niolens_x{a="1"} 2\n',
        "bad value": b'iolens_x 1,5\n',
        "no newline at end": b'iolens_x 1',
    }
    for what, page in bad.items():
        try:
            parse_exposition(page)
            ck.fail("parser self-test: accepted a page with %s: %r" % (what, page))
        except ParseError:
            ck.checks += 1


# --- HTTP, Prometheus ---------------------------------------------------------------------------

def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Prometheus:
    """A Prometheus server on a free loopback port scraping one target every second, with its
    own config and TSDB in a temp dir; killed at exit; its log kept for failure messages."""

    def __init__(self, ck, target):
        self.dir = D.tempdir("prometheus")
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.log_path = os.path.join(self.dir, "prometheus.log")
        cfg = os.path.join(self.dir, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "  evaluation_interval: 1s\nscrape_configs:\n  - job_name: iolens\n"
                    # as packaging/prometheus/prometheus.yml: keep iolensd's `node` label, and
                    # put the node on the daemon's own series too (the dashboard filters on it)
                    "    honor_labels: true\n"
                    "    static_configs:\n      - targets: ['%s']\n"
                    "        labels: {node: '%s'}\n" % (target, NODE))
        self.logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [PROMETHEUS, "--config.file=" + cfg, "--storage.tsdb.path=" + os.path.join(
                self.dir, "data"), "--web.listen-address=127.0.0.1:%d" % self.port,
             "--storage.tsdb.retention.time=1h"],
            stdin=subprocess.DEVNULL, stdout=self.logf, stderr=subprocess.STDOUT,
            start_new_session=True)
        D.Cleanup.register("kill prometheus", self.kill)
        t0 = time.monotonic()
        if not D.wait_for("prometheus /-/ready", self._ready, 60, interval=0.1):
            ck.fatal("prometheus did not get ready within 60 s (exit %r); log:\n%s" %
                     (self.proc.poll(), self.log()[-3000:]))
        D.log("prometheus pid %d on port %d ready in %.1f s" %
              (self.proc.pid, self.port, time.monotonic() - t0))

    def _ready(self):
        if self.proc.poll() is not None:
            return True  # reported by the caller
        try:
            return http_get(self.url + "/-/ready", timeout=1)[0] == 200
        except (OSError, urllib.error.URLError):
            return False

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def log(self):
        return D.read_text(self.log_path)

    def api(self, path, params=None):
        """GET /api/v1/PATH: (data, None) or (None, error text)."""
        url = self.url + "/api/v1/" + path
        if params:
            url += "?" + urllib.parse.urlencode(params, doseq=True)
        try:
            _, body = http_get(url, timeout=10)
        except urllib.error.HTTPError as e:
            body = e.read()
        except (OSError, urllib.error.URLError) as e:
            return None, "request failed: %s" % e
        try:
            doc = json.loads(body)
        except ValueError:
            return None, "not JSON: %r" % body[:300]
        if doc.get("status") != "success":
            return None, "%s: %s" % (doc.get("errorType"), doc.get("error"))
        return doc["data"], None

    def query(self, expr):
        """An instant query: (list of (labels, float), None) or (None, error)."""
        data, err = self.api("query", {"query": expr})
        if err:
            return None, err
        if data["resultType"] == "scalar":
            return [({}, float(data["result"][1]))], None
        if data["resultType"] != "vector":
            return None, "result type %s" % data["resultType"]
        return [(r["metric"], float(r["value"][1])) for r in data["result"]], None

    def value(self, expr):
        """The single value of `expr` (None if empty; the error text if it failed)."""
        res, err = self.query(expr)
        if err:
            return "error: " + err
        if len(res) != 1:
            return None if not res else "%d series: %s" % (len(res), res[:4])
        return res[0][1]


def sel(**labels):
    return "{" + ",".join('%s="%s"' % (k, v.replace("\\", "\\\\").replace('"', '\\"'))
                          for k, v in labels.items()) + "}"


def converge(ck, prom, what, checks, timeout=CONVERGE_S):
    """checks: [(description, PromQL, expected)]; polls until every value equals its
    expectation (Prometheus may lag the page by a scrape); reports each one that never did."""
    last = {}

    def all_equal():
        ok = True
        for desc, expr, want in checks:
            got = prom.value(expr)
            last[desc] = (expr, got)
            if got != want:
                ok = False
        return ok
    t0 = time.monotonic()
    done = D.wait_for(what, all_equal, timeout, interval=0.5)
    for desc, expr, want in checks:
        ck.eq("%s (%s)" % (desc, expr), want, last[desc][1])
    if done:
        D.log("%s: %d values as expected after %.1f s" % (what, len(checks),
                                                          time.monotonic() - t0))
    return bool(done)


RATE_SHORT_S = 5  # 5 scrapes: a window holding only samples after job A's I/O


def query_at(prom, expr, t):
    """An instant query evaluated at wall time t: ({labels: value}, None) or (None, error)."""
    data, err = prom.api("query", {"query": expr, "time": "%.3f" % t})
    if err:
        return None, err
    if data["resultType"] != "vector":
        return None, "result type %s" % data["resultType"]
    return {tuple(sorted(r["metric"].items())): float(r["value"][1])
            for r in data["result"]}, None


def check_idle_rates(ck, prom, ja, truth, t_final):
    """rate() of job A's byte counters once it is idle (it waits on stdin after its I/O, and
    Prometheus's samples have been its exact totals since t_final). Ground truth: the
    workload's bytes per op.
    - A window of RATE_SHORT_S after t_final holds only final samples: the rate is exactly 0.
    - The 1 m window: Prometheus's rate is the increase of the samples in it (at most the op's
      total: the counter starts at 0 and ends at it; more would be a reset or a double count),
      extrapolated by less than 1.1 mean sample intervals at each end, over 60 s: at most
      total * (1 + 2.2 / (N - 1)) / 60 with N the samples in the window (extrapolatedRate in
      Prometheus's promql/functions.go)."""
    series = "iolens_job_io_bytes_total%s" % sel(**ja)
    errors = []

    def short_window_final():
        """The three queries at one time t whose short window holds 3 final samples, or None
        (not yet, or a query failed: asked again)."""
        t = time.time()
        if t < t_final + RATE_SHORT_S:
            return None
        got = [query_at(prom, e, t) for e in (
            "count_over_time(%s[%ds])" % (series, RATE_SHORT_S),
            "rate(%s[%ds])" % (series, RATE_SHORT_S), "rate(%s[1m])" % series,
            "count_over_time(%s[1m])" % series)]
        bad = [err for _, err in got if err]
        if bad:
            errors.append(bad[0])
            return None
        n5, short, longr, n = [v for v, _ in got]
        if not (n5 and min(n5.values()) >= 3 and short and longr and n):
            return None
        return short, longr, n
    got = D.wait_or_fail(ck, "3 samples of job A within %d s, all after its totals were final"
                         % RATE_SHORT_S, short_window_final, 30, interval=0.5)
    if errors:
        D.log("Prometheus queries that failed meanwhile (asked again): %s" % errors[-3:])
    if not got:
        return
    short, longr, n = got
    for key, v in sorted(short.items()):
        ck.eq("rate(iolens_job_io_bytes_total[%ds]) of idle job A, %s" % (RATE_SHORT_S, dict(key)),
              0.0, v)
    for key, v in sorted(longr.items()):
        op = dict(key).get("op")
        total = truth.bytes.get(op)
        samples = n.get(key, 0)
        if not ck.check(total is not None and samples >= 2, "job A's series %s: op %r, %r samples "
                        "in 1 m" % (dict(key), op, samples)):
            continue
        bound = total * (1 + 2.2 / (samples - 1)) / 60
        D.log("rate(iolens_job_io_bytes_total[1m]) of job A, op %s: %.0f B/s (bound %.0f: %d "
              "bytes, %d samples)" % (op, v, bound, total, samples))
        ck.check(math.isfinite(v) and 0 <= v <= bound,
                 "rate(iolens_job_io_bytes_total[1m]) of job A op %s: %r, want at most %.0f (its "
                 "%d bytes in %d samples)" % (op, v, bound, total, samples))


# --- ground truth -------------------------------------------------------------------------------

class Truth:
    """What the workload's command line makes it do: per op bytes/calls, size-bucket counts,
    per class bytes/calls/files/metadata."""

    def __init__(self, classes):
        self.classes = classes  # [(name, prefix)]
        self.argv = []
        self.bytes = {"read": 0, "write": 0}
        self.calls = {"read": 0, "write": 0}
        self.sizes = {"read": [], "write": []}  # (size, count)
        self.meta = {"open": 0, "close": 0, "fsync": 0}
        self.cls = {}  # class -> {"read"/"write": bytes, "read_ops"/..., "files": set, "meta"}
        self.files = {}  # path (bytes) -> bytes read + written
        # Darshan's FILE_NOT_ALIGNED: calls at an offset that is no multiple of the file's
        # alignment (Darshan's rule, e2e_common); each op's calls are at 0, req, 2 req, ...
        self.file_not_aligned = 0

    def klass(self, path):
        p = os.fsdecode(path) if isinstance(path, bytes) else path
        return next((name for name, pre in self.classes if p.startswith(pre)), "other")

    def op(self, op, path, req, n, sync=False):
        pb = os.fsencode(path)
        self.argv += [b"r" if op == "read" else b"w", pb, str(req).encode(), str(n).encode()]
        if op == "write":
            self.argv.append(b"1" if sync else b"0")
        self.bytes[op] += req * n
        self.calls[op] += n
        self.sizes[op].append((req, n))
        self.meta["open"] += 1
        self.meta["close"] += 1
        self.meta["fsync"] += 1 if sync else 0
        c = self.cls.setdefault(self.klass(pb), {"read": 0, "write": 0, "read_ops": 0,
                                                 "write_ops": 0, "files": set(), "meta": 0})
        c[op] += req * n
        c[op + "_ops"] += n
        c["files"].add(pb)
        c["meta"] += 2 + (1 if sync else 0)
        self.files[pb] = self.files.get(pb, 0) + req * n
        align = E.darshan_file_alignment(os.fsdecode(pb))
        if align > 1:
            self.file_not_aligned += sum(1 for k in range(n) if (k * req) % align)

    def cumulative(self, op, le):
        return sum(n for size, n in self.sizes[op] if le is None or size <= le)


def make_file(path, size):
    with open(path, "wb") as f:
        f.write(b"d" * size)


# --- the dashboard ------------------------------------------------------------------------------

_GRAFANA_SPECIAL = re.compile(r"([$^*+?.()|\\{}\[\]])")


def grafana_regex_escape(v):
    """As Grafana's Prometheus data source escapes a single value for =~ (each regex
    metacharacter gets a backslash, doubled for the PromQL string)."""
    return _GRAFANA_SPECIAL.sub(r"\\\\\1", v)


def walk_panels(node, out):
    for p in node.get("panels", []) or []:
        out.append(p)
        walk_panels(p, out)
    for row in node.get("rows", []) or []:  # the old schema
        walk_panels(row, out)
    return out


def check_dashboard(ck, prom, path, job_id, node):
    try:
        with open(path, "rb") as f:
            dash = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError) as e:
        ck.fail("dashboard %s: cannot load: %s" % (path, e))
        return
    if isinstance(dash.get("dashboard"), dict):
        dash = dash["dashboard"]  # an export wrapped for the HTTP API
    variables = {v.get("name"): v for v in (dash.get("templating") or {}).get("list", [])}
    ck.check("job_id" in variables, "dashboard %s has no `job_id` templating variable (has %s)" %
             (path, sorted(variables)))
    values = {"job_id": grafana_regex_escape(job_id), "node": node, "__rate_interval": "1m",
              "__interval": "15s", "__interval_ms": "15000", "__range": "5m",
              "__range_s": "300", "__range_ms": "300000"}
    for name, v in variables.items():
        if name not in values and name:
            values[name] = ".*"  # any other variable: all of its values
            D.log("dashboard: variable $%s set to .*" % name)
    # the variables' own queries: label_values(SELECTOR, label) must offer job A
    var_q = variables.get("job_id", {}).get("query")
    if isinstance(var_q, dict):
        var_q = var_q.get("query")
    m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", var_q or "")
    if m and m.group(2) == "job_id":
        match = re.sub(r"\$\{?(\w+)\}?", lambda x: values.get(x.group(1), x.group(0)),
                       m.group(1))
        data, err = prom.api("label/job_id/values", {"match[]": match})
        ck.check(not err and job_id in (data or []), "dashboard variable job_id (label_values"
                 "(%s, job_id)) does not offer %s: %s" % (match, job_id, err or data))

    def subst(expr):
        def repl(x):
            name = x.group(1) or x.group(2)
            if name not in values:
                ck.fail("dashboard expr uses an undefined variable $%s: %r" % (name, expr))
                return x.group(0)
            return values[name]
        return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", repl, expr)

    panels = walk_panels(dash, [])
    nq = 0
    for p in panels:
        title = p.get("title") or "(untitled %s panel id %s)" % (p.get("type"), p.get("id"))
        for t in p.get("targets", []) or []:
            if "expr" not in t:
                continue
            expr = t.get("expr")
            if not ck.check(isinstance(expr, str) and expr.strip(),
                            "dashboard panel %r target %r: empty expr" % (title, t.get("refId"))):
                continue
            q = subst(expr)
            res, err = prom.query(q)
            nq += 1
            if err:
                ck.fail("dashboard panel %r: query failed: %s\n  expr: %s" % (title, err, q))
            else:
                ck.check(res, "dashboard panel %r: empty result for job %s, node %r\n  expr: %s" %
                         (title, job_id, node, q))
    ck.check(nq > 0, "dashboard %s: no panel has a Prometheus expr" % path)
    D.log("dashboard ($node = %r): %d panels, %d queries run" % (node, len(panels), nq))


# --- the page -----------------------------------------------------------------------------------

def fetch_page(ck, port, what):
    try:
        status, raw = http_get("http://127.0.0.1:%d/metrics" % port)
    except (OSError, urllib.error.URLError) as e:
        ck.fail("%s: GET /metrics failed: %s" % (what, e))
        return None, None
    if not ck.eq("%s: GET /metrics status" % what, 200, status):
        return None, raw
    try:
        return parse_exposition(raw), raw
    except ParseError as e:
        ck.fail("%s: /metrics does not parse: %s" % (what, e))
        return None, raw


def job_series(samples, job_id):
    return [s for s in samples if s[0].startswith("iolens_job_") and s[1].get("job_id") == job_id]


class Checker(E.Checker):
    """E.Checker that prints the logs of iolensd and Prometheus when the test fails."""

    logs = ()  # [(name, fn returning the log text)]

    def finish(self):
        if self.failures:
            for name, fn in self.logs:
                D.log("--- %s log (tail) ---\n%s" % (name, fn()[-4000:]))
        super().finish()


def check_daemon_alive(ck, d, what):
    if not d.alive():
        ck.fatal("iolensd exited (code %r) %s" % (d.proc.poll(), what))


def main():
    args = D.parse_args(extra=[(["--dashboard"], {"required": True,
                                                  "help": "packaging/grafana/iolens-jobs.json"})])
    D.require_root()
    ck = Checker("daemon_metrics")
    self_test_parser(ck)
    if not os.access(PROMETHEUS, os.X_OK):
        ck.fatal("%s is missing: install Debian's `prometheus` package (CI does)" % PROMETHEUS)
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        ck.fatal("no C compiler (cc/gcc/clang) to build the workload")
    t_start = time.monotonic()
    cg = D.Cgroups()
    work = D.tempdir("metrics-work")
    data, ckpt, other = (os.path.join(work, x) for x in ("data", "ckpt", "other"))
    for x in (data, ckpt, other):
        os.mkdir(x)
    many_dir = D.tempdir("metrics-many", base=os.environ.get("IOLENS_E2E_MANY_TMP", "/dev/shm"))

    wl = os.path.join(work, "metrics_workload")
    with open(wl + ".c", "w") as f:
        f.write(WORKLOAD_C)
    r = subprocess.run([cc, "-O2", "-static", "-o", wl, wl + ".c"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        ck.fatal("cannot build the static workload with %s:\n%s" % (cc, r.stdout))

    # Ground truth: what the workload is told to do.
    classes = [("dataset", data + "/"), ("checkpoint", ckpt + "/")]
    truth = Truth(classes)
    for i in range(20):
        n = i % 4 + 1
        make_file(os.path.join(data, "big%02d" % i), n * 65536)
        truth.op("read", os.path.join(data, "big%02d" % i), 65536, n)
    make_file(os.path.join(data, "small"), 30 * 50)
    truth.op("read", os.path.join(data, "small"), 50, 30)
    make_file(os.path.join(data, "mid"), 10 * 4000)
    truth.op("read", os.path.join(data, "mid"), 4000, 10)
    truth.op("write", os.path.join(ckpt, "ckpt.pt"), MIB, 8, sync=True)
    hostile = os.path.join(os.fsencode(other), HOSTILE_NAME)
    truth.op("write", hostile, MIB, 12)
    truth.op("read", hostile, MIB, 12)
    hostile_label = other + "/" + HOSTILE_LABEL

    rules = '  - cgroup: {paths: ["%s/metrics/*"]}' % cg.prefix
    extra = ("grace_period: %ds\n"
             # sized for job B's burst of files as in daemon_limits_test.py: nothing may be lost
             "limits:\n  kernel_file_records: 262144\n  ring_size: 64MiB\n"
             'metrics:\n  listen: "127.0.0.1:0"\n  node: "%s"\n  top_files: %d\n'
             "  max_jobs: 1000\n  classes:\n"
             '    - {name: dataset, prefixes: ["%s/"]}\n'
             '    - {name: checkpoint, prefixes: ["%s/"]}\n' %
             (GRACE_S, NODE, TOP_FILES, data, ckpt))
    d = D.Daemon(args.iolensd, rules, extra_config=extra, tag="metrics", iolens=args.iolens)
    st = d.start(ck)
    m = st.get("metrics") if isinstance(st, dict) else None
    if not (isinstance(m, dict) and m.get("ports")):
        ck.fatal("iolensd status has no metrics.ports (status: %s); log:\n%s" %
                 (json.dumps(st)[:1000], d.log()[-2000:]))
    port = m["ports"][0]
    D.log("iolensd serves /metrics on 127.0.0.1:%d (status.metrics %s)" % (port, m))
    ck.logs = [("iolensd", d.log)]
    prom = Prometheus(ck, "127.0.0.1:%d" % port)
    ck.logs.append(("prometheus", prom.log))

    sub_a, sub_b = "metrics/main", "metrics/many"
    job_a, job_b = "cgroup" + cg.rel(sub_a), "cgroup" + cg.rel(sub_b)
    cg.mkdir(sub_a)
    cg.mkdir(sub_b)
    d.wait_live(ck, [job_a, job_b])

    # Job A: its operations, then it waits (live) until the test closes its stdin.
    pa = D.run_in_cgroup(cg.abs(sub_a), [os.fsencode(wl)] + truth.argv, stdin=subprocess.PIPE)
    D.Cleanup.register("kill workload A", lambda: pa.poll() is None and pa.kill())
    if not select.select([pa.stdout], [], [], 60)[0]:
        ck.fatal("workload A did not finish its I/O within 60 s")
    line = pa.stdout.readline().decode()
    if not line.startswith("done"):
        pa.kill()
        ck.fatal("workload A failed (exit %r): %r %s" % (pa.wait(), line,
                                                         pa.stderr.read().decode()))
    ck.eq("workload A pid (the shell's, kept through exec)", "done %d" % pa.pid, line.strip())
    # Job B: 100,000 files, in the background while job A is checked.
    t_b = time.monotonic()
    pb = D.run_in_cgroup(cg.abs(sub_b), [args.workload, "many", many_dir, str(NMANY),
                                         str(MANY_SIZE)])
    D.Cleanup.register("kill workload B", lambda: pb.poll() is None and pb.kill())

    # 3. Job A through Prometheus.
    check_daemon_alive(ck, d, "during job A's I/O")
    ja = dict(job_id=job_a)
    checks = []
    # Every file of job A is under `work`: one device, as stat(2) names it (MAJ:MIN).
    st_dev = os.stat(work).st_dev
    device = "%d:%d" % (os.major(st_dev), os.minor(st_dev))
    for op in ("read", "write"):
        o = dict(ja, op=op)
        checks += [
            ("job bytes %s on device %s" % (op, device),
             "sum(iolens_job_device_io_bytes_total%s)" % sel(device=device, **o),
             float(truth.bytes[op])),
            ("job calls %s on device %s" % (op, device),
             "sum(iolens_job_device_io_operations_total%s)" % sel(device=device, **o),
             float(truth.calls[op])),
            ("job bytes %s" % op, "sum(iolens_job_io_bytes_total%s)" % sel(**o),
             float(truth.bytes[op])),
            ("job calls %s" % op, "sum(iolens_job_io_operations_total%s)" % sel(**o),
             float(truth.calls[op])),
            ("size histogram _count %s" % op, "sum(iolens_job_request_size_bytes_count%s)" %
             sel(**o), float(truth.calls[op])),
            ("size histogram _sum %s" % op, "sum(iolens_job_request_size_bytes_sum%s)" %
             sel(**o), float(truth.bytes[op])),
            ("duration histogram _count %s" % op,
             "sum(iolens_job_request_duration_seconds_count%s)" % sel(**o),
             float(truth.calls[op])),
            ("duration histogram +Inf bucket %s" % op,
             "sum(iolens_job_request_duration_seconds_bucket%s)" % sel(le="+Inf", **o),
             float(truth.calls[op])),
        ]
        for le in SIZE_LE + (None,):
            les = "+Inf" if le is None else str(le)
            checks.append(("size bucket %s le=%s" % (op, les),
                           "sum(iolens_job_request_size_bytes_bucket%s)" % sel(le=les, **o),
                           float(truth.cumulative(op, le))))
    for cname, c in sorted(truth.cls.items()):
        co = dict(ja, **{"class": cname})
        for op in ("read", "write"):
            checks += [
                ("class %s bytes %s" % (cname, op),
                 "sum(iolens_job_class_io_bytes_total%s)" % sel(op=op, **co), float(c[op])),
                ("class %s calls %s" % (cname, op),
                 "sum(iolens_job_class_io_operations_total%s)" % sel(op=op, **co),
                 float(c[op + "_ops"]))]
        checks += [
            ("class %s files" % cname, "sum(iolens_job_class_files%s)" % sel(**co),
             float(len(c["files"]))),
            ("class %s metadata operations (open+close+fsync)" % cname,
             "sum(iolens_job_class_metadata_operations_total%s)" % sel(**co), float(c["meta"]))]
    for op, n in truth.meta.items():
        checks.append(("metadata %s" % op, "sum(iolens_job_metadata_operations_total%s)" %
                       sel(op=op, **ja), float(n)))
    checks += [
        ("files", "sum(iolens_job_files%s)" % sel(**ja), float(len(truth.files))),
        ("file not aligned (Darshan's FILE_NOT_ALIGNED)",
         "sum(iolens_job_file_not_aligned_operations_total%s)" % sel(**ja),
         float(truth.file_not_aligned)),
        ("memory not aligned (every buffer page-aligned)",
         "sum(iolens_job_mem_not_aligned_operations_total%s)" % sel(**ja), 0.0),
        ("job_info", "iolens_job_info%s" % sel(job_kind="cgroup", cgroup=cg.rel(sub_a),
                                               node=NODE, **ja), 1.0),
        ("processes", "sum(iolens_job_processes%s)" % sel(**ja), 1.0),
        ("processes running", "sum(iolens_job_processes_running%s)" % sel(**ja), 1.0),
        ("build_info", "count(iolens_build_info == 1)", 1.0),
        ("up", 'up{job="iolens"}', 1.0),
    ]
    a_final = converge(ck, prom, "job A's metrics in Prometheus", checks)
    t_final = time.time()  # Prometheus's samples of job A are its final totals from here on
    # rate() and the dashboard's range queries need a few samples of the job (Prometheus's first
    # scrape may come seconds after its start)
    nsamples = "max(count_over_time(iolens_job_io_bytes_total%s[1m]))" % sel(**ja)
    if not D.wait_for("3 samples of job A in Prometheus",
                      lambda: isinstance(prom.value(nsamples), float) and
                      prom.value(nsamples) >= 3, 20, interval=0.5):
        ck.fail("Prometheus holds fewer than 3 samples of job A after 20 s: %r" %
                prom.value(nsamples))
    if a_final:
        check_idle_rates(ck, prom, ja, truth, t_final)
    fill, err = prom.query("iolens_map_fill_ratio")
    ck.check(not err and fill and all(0 <= v <= 1 for _, v in fill),
             "iolens_map_fill_ratio: %s" % (err or fill or "absent"))
    lost, err = prom.query("iolens_lost_total")
    ck.check(not err and lost, "iolens_lost_total absent: %s" % err)
    for labels, v in lost or []:
        ck.eq("iolens_lost_total{cause=%r} (job A done)" % labels.get("cause"), 0.0, v)

    # 5. The page itself: strict parse, labels, the hostile top file.
    samples, raw = fetch_page(ck, port, "job A live")
    if samples is not None:
        mine = job_series(samples, job_a)
        ck.check(mine, "no iolens_job_* series of %s on /metrics" % job_a)
        for name, labels, _ in mine:
            if labels.get("node") != NODE or labels.get("job_kind") != "cgroup":
                ck.fail("%s%s: node/job_kind labels should be %r/cgroup" % (name, labels, NODE))
                break
        top = [(lab, v) for n, lab, v in mine if n == "iolens_job_top_file_io_bytes"]
        paths = {lab.get("path") for lab, _ in top}
        ck.check(len(paths) <= TOP_FILES + 1, "job A: %d top-file paths > K+1: %s" %
                 (len(paths), sorted(paths)))
        ck.check(hostile_label in paths, "job A: the hostile file (biggest, %d bytes) is not a "
                 "top file under the label %r; top paths: %s" %
                 (truth.files[hostile], hostile_label, sorted(paths)))
        for op in ("read", "write"):
            got = [v for lab, v in top if lab.get("path") == hostile_label and
                   lab.get("op") == op]
            ck.eq("iolens_job_top_file_io_bytes of the hostile file, op %s" % op,
                  [float(MIB * 12)], got)
            ck.eq("sum of iolens_job_top_file_io_bytes op %s over job A's paths" % op,
                  float(truth.bytes[op]), sum(v for lab, v in top if lab.get("op") == op))
        ck.check(b"\\\\xff" in raw, "the page does not write the byte 0xff as \\\\xff")
        ck.check(HOSTILE_NAME not in raw, "the page holds the raw hostile name")
    res, err = prom.query("iolens_job_top_file_io_bytes%s" % sel(op="read", **ja))
    ck.check(not err and any(r[0].get("path") == hostile_label for r in res or []),
             "Prometheus has no top-file series with path %r for job A: %s" %
             (hostile_label, err or sorted(r[0].get("path") for r in res)))
    data_t, err = prom.api("targets", {"state": "active"})
    tg = (data_t or {}).get("activeTargets", [])
    ck.check(len(tg) == 1 and tg[0].get("health") == "up" and not tg[0].get("lastError"),
             "Prometheus target: %s" % (err or [(t.get("health"), t.get("lastError"))
                                                for t in tg]))
    check_daemon_alive(ck, d, "while job A was checked")
    scrapes = ((d.status() or {}).get("metrics") or {}).get("scrapes")
    ck.check(isinstance(scrapes, int) and scrapes >= 3, "status.metrics.scrapes %r after "
             "Prometheus scraped for seconds" % scrapes)

    # 4. The dashboard, on job A.
    # $node as "All" (.*), then as the one node a user picks
    check_dashboard(ck, prom, args.dashboard, job_a, ".*")
    check_dashboard(ck, prom, args.dashboard, job_a, grafana_regex_escape(NODE))

    # 6. Cardinality: job B's 100,000 files.
    try:
        out, errb = pb.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        pb.kill()
        ck.fatal("job B (`job_workload many %d`) did not finish within 120 s" % NMANY)
    if pb.returncode != 0:
        ck.fatal("job B exited %d: %s" % (pb.returncode, errb.decode("utf-8", "replace")))
    mb = json.loads(out.decode().strip().splitlines()[-1])["totals"]
    D.log("job B: %d files in %.1f s" % (NMANY, time.monotonic() - t_b))
    jb = dict(job_id=job_b)
    converge(ck, prom, "job B's totals in Prometheus", [
        ("job B bytes read", "sum(iolens_job_io_bytes_total%s)" % sel(op="read", **jb),
         float(mb["bytes_read"])),
        ("job B bytes written", "sum(iolens_job_io_bytes_total%s)" % sel(op="write", **jb),
         float(mb["bytes_written"])),
        ("job B reads", "sum(iolens_job_io_operations_total%s)" % sel(op="read", **jb),
         float(mb["reads"])),
        ("job B opens", "sum(iolens_job_metadata_operations_total%s)" % sel(op="open", **jb),
         float(mb["opens"])),
        ("job B files", "sum(iolens_job_files%s)" % sel(**jb), float(NMANY)),
        ("job B top-file bytes read, all paths",
         "sum(iolens_job_top_file_io_bytes%s)" % sel(op="read", **jb), float(mb["bytes_read"])),
    ], timeout=60)
    npaths = prom.value("count(count by (path) (iolens_job_top_file_io_bytes%s))" % sel(**jb))
    ck.eq("Prometheus: distinct paths of job B's top files (K+1)", float(TOP_FILES + 1), npaths)
    folded = prom.value("sum(iolens_job_folded_records_total%s)" % sel(**jb))
    D.log("job B: folded records %r" % folded)
    check_daemon_alive(ck, d, "during job B (%d files)" % NMANY)
    samples, raw = fetch_page(ck, port, "job B done")
    if samples is not None:
        paths = {lab.get("path") for n, lab, _ in job_series(samples, job_b)
                 if n == "iolens_job_top_file_io_bytes"}
        ck.eq("/metrics: distinct paths of job B's top files (K+1)", TOP_FILES + 1, len(paths))
        ck.check("<other>" in paths, "job B's top files have no <other>: %s" % sorted(paths))
        ck.check(len(raw or b"") < 4 * MIB, "the page is %d bytes" % len(raw or b""))
        for n, lab, v in samples:
            if n == "iolens_lost_total":
                ck.eq("/metrics iolens_lost_total{cause=%r} after job B" % lab.get("cause"), 0.0,
                      v)

    # 7. Grace period: job A ends.
    pa.stdin.close()
    try:
        pa.wait(timeout=10)
    except subprocess.TimeoutExpired:
        ck.fail("workload A did not exit after EOF on stdin")
    ck.eq("workload A exit code", 0, pa.returncode)
    cg.remove_tree(sub_a)
    t_end = time.time()
    final = {}

    def ended():
        check_daemon_alive(ck, d, "while job A ended")
        s, _ = fetch_page(ck, port, "job A ending")
        if s is None:
            return None
        mine = job_series(s, job_a)
        if not mine:
            final["gone_early"] = True
            return True
        end = [v for n, _, v in mine if n == "iolens_job_end_time_seconds"]
        if not end:
            return None
        final["end"] = end[0]
        final["bytes"] = {op: sum(v for n, lab, v in mine if n == "iolens_job_io_bytes_total"
                                  and lab.get("op") == op) for op in ("read", "write")}
        final["dataset"] = sum(v for n, lab, v in mine if n == "iolens_job_class_io_bytes_total"
                               and lab.get("class") == "dataset" and lab.get("op") == "read")
        return True
    if not D.wait_for("iolens_job_end_time_seconds of job A", ended, 15, interval=0.2):
        ck.fail("job A: no iolens_job_end_time_seconds on /metrics within 15 s of its end")
    elif final.get("gone_early"):
        ck.fail("job A's series left /metrics before iolens_job_end_time_seconds appeared")
    else:
        ck.check(abs(final["end"] - t_end) < 5, "iolens_job_end_time_seconds %.3f, but the job "
                 "ended at %.3f" % (final["end"], t_end))
        ck.eq("job A final bytes on /metrics after its end", {k: float(v) for k, v in
                                                              truth.bytes.items()},
              final["bytes"])
        ck.eq("job A final dataset bytes read after its end",
              float(truth.cls["dataset"]["read"]), final["dataset"])

        def gone():
            check_daemon_alive(ck, d, "during job A's grace period")
            s, _ = fetch_page(ck, port, "job A in grace")
            if s is None:
                return None
            return time.time() if not job_series(s, job_a) else None
        t_gone = D.wait_for("job A's series to leave /metrics", gone, GRACE_S + 15,
                            interval=0.1)
        if ck.check(t_gone, "job A's series still on /metrics %d s after its end (grace %d s)"
                    % (GRACE_S + 15, GRACE_S)):
            stay = t_gone - final["end"]
            D.log("job A's series stayed %.2f s after its end time (grace %d s)" % (stay, GRACE_S))
            ck.check(GRACE_S - 0.5 <= stay <= GRACE_S + 5, "job A's series stayed %.2f s after "
                     "its end, grace_period is %d s" % (stay, GRACE_S))
        samples, _ = fetch_page(ck, port, "after job A")
        if samples is not None:
            ck.check(job_series(samples, job_b), "job B (live) lost its series with job A's")

    lost, err = prom.query("iolens_lost_total")
    for labels, v in lost or []:
        ck.eq("iolens_lost_total{cause=%r} (end)" % labels.get("cause"), 0.0, v)
    cg.remove_tree(sub_b)
    rc, _ = d.stop()
    # -15: killed by SIGTERM, i.e. a thread left the signal unblocked (iolensd takes SIGTERM
    # through a signalfd and exits 0 after writing the records of the live jobs)
    ck.eq("iolensd exit code after SIGTERM", 0, rc)
    D.log("total %.1f s" % (time.monotonic() - t_start))
    prom.kill()
    ck.finish()


if __name__ == "__main__":
    main()
