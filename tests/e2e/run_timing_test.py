#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: `IOLENS_TIMING=1 iolens run` prints its steps and its own CPU time, not the command's.

The command is a Python that burns 1.5 s of CPU and prints the CPU time it used
(time.process_time()). The test waits for iolens with wait4(), whose rusage is iolens' own CPU
plus its waited-for children's (the command). So iolens' own CPU is that total minus what the
command printed, and the `iolens: timing: cpu: user= system=` line must agree within 150 ms
(the command's start-up before its first process_time() and its exit are not in what it
printed). A line that counted the command too would be 1.5 s off. Also checked: the two step
lines carry the steps README.md "Usage" lists, each a non-negative number, their sum under the
run's wall time.
"""
import os
import re
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import e2e_common as E  # noqa: E402

BURN_S = 1.5
BURNER = ("import time\n"
          "t = time.process_time()\n"
          "while time.process_time() - t < %s: pass\n"
          "print('cpu', time.process_time(), flush=True)\n" % BURN_S)
START_STEPS = ("checks", "build", "core_btf", "open", "extras_check", "load", "attach", "rings")
EXIT_STEPS = ("child_start", "final_drain", "snapshot", "teardown")


def main():
    args = E.parse_args()
    E.require_root()
    ck = E.Checker("run_timing")
    env = dict(os.environ, IOLENS_TIMING="1")
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        p = subprocess.Popen([args.iolens, "run", "-q", "--local", "--", "/usr/bin/python3", "-c",
                              BURNER], stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.monotonic() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode()
        stderr = err.read().decode()
    if p.returncode != 0:
        ck.fatal("iolens run exited %d; stderr:\n%s" % (p.returncode, stderr))
    m = re.search(r"^cpu ([0-9.]+)$", stdout, re.M)
    if not m:
        ck.fatal("the command printed no CPU time; stdout:\n%s" % stdout)
    command_cpu = float(m.group(1))
    ck.check(command_cpu >= BURN_S, "the command used %.3f s of CPU, under %.1f s: the test "
             "proves nothing" % (command_cpu, BURN_S))

    lines = {}
    for k, rest in re.findall(r"^iolens: timing: (\w+): (.*)$", stderr, re.M):
        kv = {}
        for word in rest.split():
            name, _, value = word.partition("=")
            try:
                kv[name] = float(value)
            except ValueError:
                ck.check(False, "timing %s: %r is not name=number" % (k, word))
        lines[k] = kv
    for k, want in (("start", START_STEPS), ("exit", EXIT_STEPS), ("cpu", ("user", "system"))):
        got = lines.get(k)
        if not ck.check(got is not None, "no 'iolens: timing: %s:' line; stderr:\n%s" % (k, stderr)):
            continue
        for step in want:
            ck.check(step in got and got[step] >= 0,
                     "timing %s: %s missing or negative: %s" % (k, step, got))
    steps_ms = sum(v for k in ("start", "exit") for v in lines.get(k, {}).values())
    ck.check(steps_ms < wall * 1000.0,
             "the steps add up to %.1f ms, more than the run's wall time %.1f ms"
             % (steps_ms, wall * 1000.0))

    if "cpu" in lines:
        reported = (lines["cpu"]["user"] + lines["cpu"]["system"]) / 1000.0
        total = ru.ru_utime + ru.ru_stime  # iolens and the command it waited for
        own = total - command_cpu
        E.log("iolens reported %.3f s of its own CPU; wait4: %.3f s in all, the command %.3f s, "
              "so iolens' own %.3f s" % (reported, total, command_cpu, own))
        ck.check(reported > 0, "iolens reported no CPU time of its own")
        ck.check(abs(reported - own) < 0.15,
                 "iolens reported %.3f s of its own CPU; wait4 less the command's says %.3f s"
                 % (reported, own))
    ck.finish()


if __name__ == "__main__":
    main()
