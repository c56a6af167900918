#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: the kernel programs stay cheap to verify (issue 20; bpf/README.md "Cheap to verify").

Every `iolens run` loads its programs, and the verifier's work is most of its start-up: about
1.5-3 us per instruction it walks on the test VM. Not a timing: the verifier's own count of
walked instructions (bpf_prog_info.verified_insns), read from the programs of a live
`iolens run -q -- cat`, is deterministic for a kernel and an object. Budgets, about twice what
this design walks on the test kernel (6.18) and far below what inlining every handler cost
before issue 20 (sys_exit 100,482, all programs 120,830):
  sys_exit <= 20,000, sys_enter <= 2,000, every other program <= 8,000, all <= 50,000.
Both ways `iolens run` loads them: without `--trace` (trace mode's code left out, the
`.rodata` constant trace_calls 0) and with it (as iolensd loads them). On Linux 6.8+, whose
verifier checks a global function only where it is called, sys_exit must walk fewer
instructions without `--trace` than with it (the trace code is ~1,800 of them); before 6.8,
no more. Also: the core programs are all loaded (a count of 0 would mean the read went wrong).
"""
import os
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import e2e_common as E  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "bench"))
from startup import verified_insns  # noqa: E402  (bench/startup.py: ctypes, bpf_prog_info)

BUDGET = {"sys_exit": 20000, "sys_enter": 2000}
OTHER_BUDGET = 8000
TOTAL_BUDGET = 50000
CORE = ("sys_enter", "sys_exit", "sched_process_f", "sched_process_e")


def check_budgets(ck, what, insns):
    E.log("verified_insns, %s: %s" % (what, ", ".join("%s %d" % kv for kv in sorted(insns.items()))))
    for name in CORE:
        ck.check(insns.get(name, 0) > 0, "%s, %s: not loaded or no count read (%r)" %
                 (what, name, insns.get(name)))
    for name, n in sorted(insns.items()):
        budget = BUDGET.get(name, OTHER_BUDGET)
        ck.check(n <= budget, "%s: %s walks %d instructions (budget %d): each costs start-up of "
                 "every iolens run (bpf/README.md \"Cheap to verify\")" % (what, name, n, budget))
    total = sum(insns.values())
    ck.check(total <= TOTAL_BUDGET, "%s: all programs walk %d instructions (budget %d)" %
             (what, total, TOTAL_BUDGET))


def main():
    a = E.parse_args()
    E.require_root()
    ck = E.Checker("verifier_budget")
    plain = verified_insns(a.iolens)
    check_budgets(ck, "without --trace", plain)
    with tempfile.TemporaryDirectory(prefix="iolens-budget-") as tmp:
        traced = verified_insns(a.iolens, ["--trace", os.path.join(tmp, "t.iotrace")])
    check_budgets(ck, "with --trace", traced)
    release = os.uname().release.split(".")
    lazy = (int(release[0]), int(release[1].split("-")[0])) >= (6, 8)
    without, with_trace = plain.get("sys_exit", 0), traced.get("sys_exit", 0)
    if lazy:
        ck.check(0 < without < with_trace, "sys_exit walks %d instructions without --trace, %d "
                 "with it: trace mode's code was not left out" % (without, with_trace))
    else:
        ck.check(0 < without <= with_trace, "sys_exit walks %d without --trace, %d with it" %
                 (without, with_trace))
    ck.finish()


if __name__ == "__main__":
    main()
