"""System calls on the calling thread and on ours, per workload: the guard
for "no syscall on the caller's thread per call or per pass".

    python benchmarks/syscalls.py [--calls 200000] [--passes 300]

Each workload runs in a child process under `strace -f`, once without a
profiler and once with every call written; the table gives, per system
call, what the profiled run made beyond the unprofiled one, on the thread
that runs the model (the caller) and on all other threads (the flusher and
the grower, which sgl_shapeprof starts). Counts, not times: strace slows
every call down, so nothing here is a timing. Workloads (torch.add, 8x8):

- long: one pass of --calls calls (records stream into the file);
- passes: --passes passes of 800 calls back to back (a busy server);
- gaps: --passes passes of 20 calls with 2 ms sleeps between them (an idle
  one: the flusher cuts the file between passes, the next pass grows it).
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

WORKLOAD = r'''
import sys, time, torch
mode, kind, n, passes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(1)
a = torch.randn(8, 8)
prof = None
if mode == "written":
    from sgl_shapeprof import ShapeProfiler
    prof = ShapeProfiler(sys.argv[5])
begin = (lambda: prof.start_forward_pass()) if prof else (lambda: None)
end = (lambda: prof.end_forward_pass()) if prof else (lambda: None)
for _ in range(200):
    torch.add(a, a)
print("START", flush=True)
if kind == "long":
    begin()
    for _ in range(n):
        torch.add(a, a)
    end()
else:
    per, gap = (800, 0) if kind == "passes" else (20, 0.002)
    for _ in range(passes):
        begin()
        for _ in range(per):
            torch.add(a, a)
        end()
        if gap:
            time.sleep(gap)
print("STOP", flush=True)
if prof:
    prof.close()
'''

LINE = re.compile(r"^(\d+)\s+(?:<\.\.\. )?([a-z_0-9]+)[( ]")


def counts(mode: str, kind: str, args, tmp: str) -> tuple:
    """({syscall: n} on the caller, {syscall: n} on other threads), between
    the workload's START and STOP markers (its writes to stdout)."""
    out = os.path.join(tmp, f"{mode}-{kind}.strace")
    cmd = ["strace", "-f", "-qq", "-o", out, sys.executable, "-c", WORKLOAD, mode, kind, str(args.calls),
           str(args.passes), os.path.join(tmp, f"{kind}.jsonl")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"syscalls.py: the {kind} workload failed ({mode}):\n{r.stderr[-2000:]}")
    caller, others = collections.Counter(), collections.Counter()
    main_pid, on = None, False
    for line in open(out):
        m = LINE.match(line)
        if not m or "resumed>" in line:
            continue
        pid, name = m.groups()
        if main_pid is None:
            main_pid = pid
        if name == "write" and pid == main_pid and ("START" in line or "STOP" in line):
            on = "START" in line
            continue
        if on:
            (caller if pid == main_pid else others)[name] += 1
    return caller, others


def added(prof: collections.Counter, base: collections.Counter) -> str:
    diff = {k: prof[k] - base.get(k, 0) for k in prof}
    shown = [f"{k} {v:+d}" for k, v in sorted(diff.items(), key=lambda kv: -kv[1]) if v]
    return ", ".join(shown) or "none"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=200000, help="calls of the long pass")
    ap.add_argument("--passes", type=int, default=300, help="passes of the other two workloads")
    args = ap.parse_args()
    if not shutil.which("strace"):
        raise SystemExit("syscalls.py: needs strace (apt-get install strace)")
    tmp = tempfile.mkdtemp()
    try:
        print("| workload | records | on the caller (beyond no profiler) | on our threads |")
        print("|---|---|---|---|")
        for kind in ("long", "passes", "gaps"):
            base_caller, base_others = counts("off", kind, args, tmp)
            caller, others = counts("written", kind, args, tmp)
            records = args.calls if kind == "long" else args.passes * (800 if kind == "passes" else 20)
            print(f"| {kind} | {records:,} | {added(caller, base_caller)} | {added(others, base_others)} |",
                  flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
