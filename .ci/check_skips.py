#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Fails CI when a test skipped, wholly or in part, unless the skip is on the allow-list.

ctest counts a skipped test as a success, and a test that drops one of its cases and passes
prints only a line saying so: a suite can go green having proven less than it claims. This reads
the JUnit files `ctest --output-junit` wrote and finds
  - whole tests that did not run (status "notrun" or "disabled": an e2e test's exit 77, a gtest's
    GTEST_SKIP, which CMake's gtest_discover_tests maps to a skip), and
  - parts that were skipped inside a passing test: an output line starting with the word SKIP
    (the tests' convention for a case they drop, e.g. "SKIP the FUSE part: no /dev/fuse"), or
    gtest's "[  SKIPPED ]".
Each is checked against the allow-list (a file of `TEST_REGEX LINE_REGEX  # why` lines; both
regular expressions must match, the line one against the skip's message or output line). The
exit status is 1 when any skip is not allowed or a JUnit file cannot be read, else 0.

    check_skips.py ALLOW_LIST JUNIT.xml...
"""
import re
import sys
import xml.etree.ElementTree as ET

SOFT_SKIP = re.compile(r"^\s*(SKIP\b|\[  SKIPPED \])")


def read_allow_list(path):
    rules = []
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split(None, 1)
            if len(parts) != 2:
                raise ValueError("%s:%d: want TEST_REGEX LINE_REGEX, got %r" % (path, n, line))
            try:
                rules.append((re.compile(parts[0]), re.compile(parts[1]), "%s:%d" % (path, n)))
            except re.error as e:
                raise ValueError("%s:%d: bad regular expression: %s" % (path, n, e))
    return rules


def skips_in(path):
    """(test name, what was skipped) for every skip in one ctest JUnit file."""
    root = ET.parse(path).getroot()
    found = []
    for case in root.iter("testcase"):
        name = case.get("name", "?")
        status = case.get("status", "")
        out = case.findtext("system-out") or ""
        if status in ("notrun", "disabled") or case.find("skipped") is not None:
            el = case.find("skipped")
            msg = el.get("message", "") if el is not None else status
            # the test's own reason, when it printed one
            reason = next((ln.strip() for ln in out.splitlines() if SOFT_SKIP.match(ln)), "")
            found.append((name, "whole test not run (%s)%s" % (
                msg, ": " + reason if reason else "")))
            continue
        for ln in out.splitlines():
            if SOFT_SKIP.match(ln):
                found.append((name, ln.strip()))
    return found


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    try:
        rules = read_allow_list(argv[1])
    except (OSError, ValueError) as e:
        print("check_skips: allow-list: %s" % e, file=sys.stderr)
        return 1
    bad = allowed = 0
    for path in argv[2:]:
        try:
            skips = skips_in(path)
        except (OSError, ET.ParseError) as e:
            print("check_skips: cannot read %s: %s" % (path, e), file=sys.stderr)
            bad += 1
            continue
        for name, what in skips:
            rule = next((r for r in rules if r[0].search(name) and r[1].search(what)), None)
            if rule:
                allowed += 1
                print("check_skips: allowed (%s): %s: %s" % (rule[2], name, what))
            else:
                bad += 1
                print("check_skips: NOT ALLOWED: %s: %s" % (name, what))
    if bad:
        print("check_skips: %d skip(s) or unreadable file(s) not on %s: a skipped test proves "
              "nothing; make it run here, or add it to the list with the reason" % (bad, argv[1]))
        return 1
    print("check_skips: no skip outside the allow-list (%d allowed)" % allowed)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
