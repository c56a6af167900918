#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The Python reader printed in docs/trace-format.md, run on files from the C++ writer: the doc's
layout is the file's (every CRC, offset and count it checks), and it reads back what
tests/unit/trace_samples.hpp put in (hostile names included)."""
import argparse
import pathlib
import re
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--doc", required=True)
    ap.add_argument("--samples", required=True, help="the iolens_trace_sample_files binary")
    ap.add_argument("--dir", required=True)
    args = ap.parse_args()

    blocks = re.findall(r"```python\n(.*?)```", pathlib.Path(args.doc).read_text(), re.S)
    if len(blocks) != 1:
        sys.exit(f"expected one python block in {args.doc}, found {len(blocks)}")
    sketch = {}
    exec(compile(blocks[0], args.doc, "exec"), sketch)
    read_trace, byte_string = sketch["read_trace"], sketch["byte_string"]

    subprocess.run([args.samples, args.dir], check=True)
    files = sorted(pathlib.Path(args.dir).glob("*.iotrace"))
    if len(files) < 5:
        sys.exit(f"the sample tool wrote {len(files)} files")
    for f in files:
        t = read_trace(str(f))
        assert t["complete"] == (f.stem != "unfinished"), f
        print(f"{f.name}: {len(t['ops'])} ops, {len(t['files'])} files, "
              f"{len(t['processes'])} processes, complete={t['complete']}")

    # What trace_samples.hpp puts in small.iotrace.
    t = read_trace(str(pathlib.Path(args.dir) / "small.iotrace"))
    meta = t["meta"]
    assert byte_string(meta["node"]) == b"node-\xff\x01", meta["node"]
    assert byte_string(meta["target"]) == b'cgroup:/kubepods.slice/pod"x"/\n'
    assert byte_string(meta["command"][0]) == bytes(range(1, 256))
    assert [byte_string(k) for k, _ in meta["job"]["labels"]] == [b"", b"namespace", b"pod", b"\xff key"]
    assert [f["offset"] for f in meta["op_record"]["fields"]] == [0, 8, 16, 24, 32, 36, 40, 48, 56,
                                                                  64, 68, 72, 74, 76, 80, 84]
    assert len(t["ops"]) == 20
    first = t["ops"][0]  # the extremes
    assert first["start_ns"] == 2**64 - 1 and first["offset"] == -2**63 and first["ret"] == 2**63 - 1
    assert first["op"] == 0xFFFF and first["fd"] == -2**31 and first["arg"] == -1
    assert t["ops"][1]["op"] == 2 and t["ops"][1]["pad"] == 0
    paths = sorted(t["files"].values())
    assert bytes(range(1, 256)) in paths and b"/data/line\nbreak" in paths, paths
    assert t["files"][(8 << 20, 2**64 - 1, 0)] == bytes(range(1, 256))
    p = t["processes"][(100, 5_000_000_000)]
    assert p["exit_ns"] == 9999 and p["exit_code"] == 0 and p["comm"] == b"python3\n\xff", p
    assert t["processes"][(101, 5_001_000_000)]["exit_ns"] == -1
    assert t["losses"]["ring_full"] == 1234
    assert byte_string(t["losses"]["notes"][1]) == b'a note with "quotes", \\ and \xff\n'
    print("the doc's reader reads the writer's files")


if __name__ == "__main__":
    main()
