#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""e2e: few walks of pointer loads through trusted pointers (bpf/README.md "Cheap to verify").

Each time the verifier walks a direct load of a pointer field through a trusted BTF pointer
(what bpf_get_current_task_btf() and tp_btf arguments are: `task->bpf_storage`,
`mapping->host`...), it searches the kernel's BTF linearly by name two to four times
(btf_nested_type_is_trusted), ~1.2 ms on the test VM: 52 such walks were ~35% of the CPU of
`iolens run -q -- true`. Not a timing: the count is read from the verifier's own log of every
instruction it walks (log level 2), for the object as `iolens run` loads it (.rodata defaults:
no job selection), loaded by bpftool into a private bpffs. A walk is a 64-bit load whose source
register the log shows as `trusted_ptr_`/`rcu_ptr_` and whose result is not a scalar (register
states are followed from line to line, as the log prints only the registers an instruction
changes). Budgets for the plain build (the object as bpftool loads it): 3 per program, 32 in
all (30 on 6.18 after issue 20's second round). The casts build (bpf/README.md "Two builds")
casts every such base pointer to an untrusted one: none at all, read from the verifier's log of
`iolens run` itself (IOLENS_VERIFIER_LOG, both timing modes: close_enter loads only with timing
off; and with `--trace`, without which trace mode's code is dead in sys_exit and not walked on
Linux 6.8+), which must also say which build it loaded; the plain build's count is read that
way too and must agree with bpftool's.
"""
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import e2e_common as E  # noqa: E402

PER_PROGRAM = 3
TOTAL = 32
BEGIN = re.compile(r"prog '([^']+)': -- BEGIN PROG LOAD LOG --")
LOAD = re.compile(r"^(\d+): \(79\) r(\d+) = \*\(u64 \*\)\(r(\d+) ([+-]\d+)\)\s*(?:;(.*))?$")
REG = re.compile(r"R(\d+)(?:_w)?=(\S+)")


def count_walks(log):
    """{program: [(source type, offset, result type), ...]} from a level-2 verifier log."""
    walks = collections.defaultdict(list)
    programs = set()
    prog, state = None, {}
    for line in log.splitlines():
        line = line.strip()
        m = BEGIN.search(line)
        if m:
            prog, state = m.group(1), {}
            programs.add(prog)
            continue
        if prog is None:
            continue
        m = LOAD.match(line)
        if m:
            _, dst, src, off, ann = m.groups()
            regs = dict(REG.findall(ann or ""))
            src_type = regs[src] if src in regs and src != dst else state.get(src, "?")
            dst_type = regs.get(dst, "?")
            if re.match(r"(trusted_ptr|rcu_ptr)", src_type) and not dst_type.startswith("scalar"):
                walks[prog].append((src_type.split("(")[0], off, dst_type.split("(")[0]))
            state.update(regs)
            continue
        state.update(REG.findall(line))
    return programs, walks


def walks_via_iolens(ck, iolens, build):
    """(programs, {program: walks}) of what `iolens run` loads with IOLENS_BPF_BUILD=build, from
    the verifier's log that libbpf prints with -v; both timing modes, and with --trace (trace
    mode's code walked too); each program's largest count."""
    programs, walks = set(), {}
    tmp = tempfile.mkdtemp(prefix="iolens-walks-trace-")
    for timing, extra in (("exact", []), ("off", []),
                          ("exact", ["--trace", os.path.join(tmp, "t.iotrace"), "--force"])):
        env = dict(os.environ, IOLENS_VERIFIER_LOG="3", IOLENS_BPF_BUILD=build)
        p = subprocess.run([iolens, "run", "-v", "-q", "--timing", timing] + extra + ["--", "true"],
                           capture_output=True, text=True, env=env, timeout=300)
        if p.returncode != 0:
            ck.fatal("iolens run (%s build, timing %s) exited %d:\n%s" %
                     (build, timing, p.returncode, p.stderr[-3000:]))
        ck.check("programs: the %s build" % build in p.stderr,
                 "iolens run -v does not say it loaded the %s build" % build)
        # Each line of libbpf's output comes as "iolens: debug: libbpf: <line>".
        text = "\n".join(line.split("libbpf: ", 1)[1] if "libbpf: " in line else line
                         for line in p.stderr.splitlines())
        progs, w = count_walks(text)
        programs |= progs
        for prog in progs:
            if len(w.get(prog, [])) >= len(walks.get(prog, [])):
                walks[prog] = w.get(prog, [])
    shutil.rmtree(tmp, ignore_errors=True)
    return programs, walks


def main():
    args = E.parse_args(extra=[(("--object",), {"required": True,
                                                "help": "the programs' BPF object"})])
    E.require_root()
    ck = E.Checker("verifier_walks")
    bpftool = "/usr/sbin/bpftool"
    if not os.access(bpftool, os.X_OK):
        ck.fatal("%s is missing (Debian package bpftool, listed in .ci/setup)" % bpftool)
    fs = tempfile.mkdtemp(prefix="iolens-walks-")
    try:
        subprocess.run(["mount", "-t", "bpf", "bpf", fs], check=True)
        try:
            # -d: libbpf's debug output, with each program's verifier log at level 1|2|4.
            p = subprocess.run([bpftool, "-d", "prog", "loadall", args.object,
                                os.path.join(fs, "progs")], capture_output=True, text=True,
                               timeout=300)
        finally:
            subprocess.run(["umount", fs], check=False)
    finally:
        os.rmdir(fs)
    if p.returncode != 0:
        ck.fatal("bpftool prog loadall exited %d:\n%s" % (p.returncode, p.stderr[-3000:]))
    programs, walks = count_walks(p.stdout + p.stderr)
    ck.check(len(programs) >= 20, "only %d program logs found in bpftool's output: the count "
             "below would prove nothing" % len(programs))
    ck.check("sys_exit" in programs and "mm_filemap_get_pages" in programs,
             "sys_exit or mm_filemap_get_pages has no log")
    total = 0
    for prog in sorted(programs):
        w = walks.get(prog, [])
        total += len(w)
        E.log("%s: %d %s" % (prog, len(w), w))
        ck.check(len(w) <= PER_PROGRAM, "%s walks %d pointer loads through trusted pointers "
                 "(budget %d): each costs ~1.2 ms of every iolens run's start" %
                 (prog, len(w), PER_PROGRAM))
    E.log("total: %d" % total)
    # A parser that found nothing would pass the budgets: the filter's load in sys_exit must be
    # seen (task->bpf_storage, kept there on purpose: bpf/README.md).
    ck.check(any(src.startswith("trusted_ptr_task_struct") for src, _, _ in walks["sys_exit"]),
             "no walk found in sys_exit, which loads task->bpf_storage: the parser is broken")
    ck.check(total <= TOTAL, "%d walks in all (budget %d)" % (total, TOTAL))

    # The same count from iolens's own loads: the plain build as bpftool found it, program by
    # program (what iolens run loads of it), and the casts build with none.
    for build in ("plain", "casts"):
        progs, w = walks_via_iolens(ck, args.iolens, build)
        ck.check(len(progs) >= 20 and "sys_exit" in progs and "close_enter" in progs,
                 "%s build: only %d program logs from iolens run (%s)" %
                 (build, len(progs), sorted(progs)))
        n = sum(len(v) for v in w.values())
        E.log("%s build via iolens run: %d walks in %d programs" % (build, n, len(progs)))
        for prog in sorted(progs):
            if build == "plain":
                ck.check(len(w.get(prog, [])) == len(walks.get(prog, [])),
                         "plain build: iolens run's %s walks %d, bpftool's %d" %
                         (prog, len(w.get(prog, [])), len(walks.get(prog, []))))
            else:
                ck.check(not w.get(prog), "casts build: %s walks %s: cast its base pointer "
                         "(UNTRUSTED() in bpf/iolens.bpf.c)" % (prog, w.get(prog)))
    ck.finish()


if __name__ == "__main__":
    main()
