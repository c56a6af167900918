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
changes). Budgets: 3 per program, 32 in all (30 on 6.18 after issue 20's second round).
"""
import collections
import os
import re
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
    ck.finish()


if __name__ == "__main__":
    main()
