# SPDX-License-Identifier: Apache-2.0
"""unit: .ci/check_skips.py, the CI guard against skipped tests, on JUnit files made here in the
shape ctest 3.25 writes them (checked against a real `ctest --output-junit` run when this was
written): a whole test not run, a gtest skip, a part skipped inside a passing test, a clean run,
the allow-list, and unreadable input. Exit 0 pass, 1 fail."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
GUARD = os.path.join(HERE, "..", "..", ".ci", "check_skips.py")

CASE = '<testcase name="%s" classname="%s" time="0.1" status="%s">%s<system-out>%s</system-out>' \
       '</testcase>'


def junit(cases):
    body = "".join(CASE % (n, n, st, extra, out) for n, st, extra, out in cases)
    return '<?xml version="1.0" encoding="UTF-8"?>\n<testsuite name="x" tests="%d">%s' \
           '</testsuite>\n' % (len(cases), body)


def run(tmp, cases, allow_lines, files=None):
    allow = os.path.join(tmp, "allow")
    with open(allow, "w") as f:
        f.write("# a comment\n\n" + "".join(ln + "\n" for ln in allow_lines))
    if files is None:
        path = os.path.join(tmp, "j.xml")
        with open(path, "w") as f:
            f.write(junit(cases))
        files = [path]
    p = subprocess.run([sys.executable, GUARD, allow] + files, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout


def main():
    failures = []

    def expect(what, got_rc, out, rc, *words):
        if got_rc != rc or any(w not in out for w in words):
            failures.append("%s: exit %d (want %d), output:\n%s" % (what, got_rc, rc, out))

    whole = ("e2e_x", "notrun", '<skipped message="SKIP_RETURN_CODE=77"/>',
             "SKIP: e2e_x needs root\n")
    gtest = ("Bpf.T", "notrun", '<skipped message="Regular Expression Skip"/>',
             "[  SKIPPED ] Bpf.T (0 ms)\n")
    part = ("e2e_y", "run", "", "ok 1\nSKIP the FUSE part: no /dev/fuse\nPASS\n")
    clean = ("e2e_z", "run", "", "PASS e2e_z: 10 checks\nnot a SKIP line\n")
    with tempfile.TemporaryDirectory() as tmp:
        rc, out = run(tmp, [clean], [])
        expect("clean run", rc, out, 0, "no skip outside the allow-list")
        rc, out = run(tmp, [whole, clean], [])
        expect("whole test skipped", rc, out, 1, "NOT ALLOWED: e2e_x", "needs root")
        rc, out = run(tmp, [gtest], [])
        expect("gtest skip", rc, out, 1, "NOT ALLOWED: Bpf.T")
        rc, out = run(tmp, [part], [])
        expect("part skipped in a passing test", rc, out, 1,
               "NOT ALLOWED: e2e_y: SKIP the FUSE part")
        rc, out = run(tmp, [whole, part], [r"^e2e_x$ SKIP_RETURN_CODE  # why",
                                           r"^e2e_y$ FUSE part"])
        expect("both allowed", rc, out, 0, "allowed (", "(2 allowed)")
        rc, out = run(tmp, [whole, part], [r"^e2e_y$ FUSE part"])
        expect("one allowed, one not", rc, out, 1, "NOT ALLOWED: e2e_x")
        rc, out = run(tmp, [part], [r"^e2e_y$ other reason"])
        expect("allowed test, other reason", rc, out, 1, "NOT ALLOWED: e2e_y")
        rc, out = run(tmp, [clean], [], files=[os.path.join(tmp, "missing.xml")])
        expect("missing file", rc, out, 1, "cannot read")
        bad = os.path.join(tmp, "bad.xml")
        with open(bad, "w") as f:
            f.write("<testsuite><testcase")
        rc, out = run(tmp, [clean], [], files=[bad])
        expect("truncated file", rc, out, 1, "cannot read")
        rc, out = run(tmp, [clean], ["only_one_field"])
        expect("bad allow-list line", rc, out, 1, "want TEST_REGEX LINE_REGEX")
    for f in failures:
        print("FAIL " + f)
    print("%s check_skips: %d failure(s)" % ("FAIL" if failures else "PASS", len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
