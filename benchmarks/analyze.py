"""How fast `sgl-shapeprof analyze`, `diff` and `gemm` read big records files,
and how much memory they need.

    python benchmarks/analyze.py [--records 10000000] [--dir DIR] [--keep]

Makes a records file of --records lines by repeating a real recording (the
demo's tiny Llama: prefill + decode passes, dedupe off, ~650 records per
round with fresh call_ids and pass numbers), then runs each command in its
own process and prints records/s and the peak RSS of that process. The
baseline, measured in the same run on the first million lines, is the naive
reader: json.loads on every line (what a hand-written script does).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def make_template(folder: str) -> list:
    """Recorded in a child process: torch stays out of this one, whose peak
    RSS its children would inherit (it survives fork and exec)."""
    path = os.path.join(folder, "template.jsonl")
    subprocess.run([sys.executable, __file__, "--template-child", path], check=True)
    with open(path, "rb") as f:
        return [json.loads(line) for line in f]


def record_template(path: str) -> None:
    import torch

    from sgl_shapeprof import ShapeProfiler
    from sgl_shapeprof.demo.models import make_llama, run_llama
    with torch.inference_mode(), ShapeProfiler(path) as prof:
        run_llama(make_llama(torch.bfloat16), prof, decode_steps=8)


def make_file(path: str, template: list, records: int) -> None:
    """template repeated with fresh call_ids and pass numbers, written fast."""
    passes = sorted({r["forward_pass"] for r in template})
    bodies = []
    for r in template:
        body = {k: v for k, v in r.items() if k not in ("call_id", "forward_pass")}
        bodies.append((passes.index(r["forward_pass"]), (", " + json.dumps(body)[1:] + "\n").encode()))
    n = 0
    rnd = 0
    with open(path, "wb", buffering=1 << 22) as f:
        while n < records:
            chunk = []
            base = rnd * len(passes)
            for p, body in bodies:
                n += 1
                chunk.append(b'{"call_id": %d, "forward_pass": %d' % (n, base + p + 1) + body)
                if n == records:
                    break
            f.write(b"".join(chunk))
            rnd += 1


def run(cmd: list) -> tuple:
    """(seconds, peak RSS MiB) of a child process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode not in (0, 1):
        sys.exit(f"{cmd} failed with exit status {p.returncode}")
    return dt, usage.ru_maxrss / 1024


NAIVE = """
import json, sys, time
t0 = time.perf_counter(); n = 0
with open(sys.argv[1], 'rb') as f:
    for line in f:
        json.loads(line); n += 1
        if n == int(sys.argv[2]): break
print(time.perf_counter() - t0)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--dir", help="where the big file goes (default: a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the file")
    ap.add_argument("--template-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.template_child:
        return record_template(args.template_child)
    folder = args.dir or tempfile.mkdtemp(prefix="shapeprof-bench-")
    path = os.path.join(folder, "big.jsonl")
    t0 = time.perf_counter()
    make_file(path, make_template(folder), args.records)
    size = os.path.getsize(path)
    print(f"{args.records:,} records, {size / 2**20:,.0f} MiB, made in {time.perf_counter() - t0:.1f}s")
    exe = [sys.executable, "-m", "sgl_shapeprof"]
    sub = min(args.records, 1_000_000)
    r = subprocess.run([sys.executable, "-c", NAIVE, path, str(sub)], capture_output=True, text=True)
    naive = sub / float(r.stdout)
    print(f"{'command':<34} {'records/s':>12} {'vs naive':>9} {'peak RSS':>10}")
    print(f"{'json.loads per line (baseline)':<34} {naive:>12,.0f} {1.0:>8.2f}x {'':>10}")
    for name, cmd in (("analyze", ["analyze", path]),
                      ("analyze --show-shapes --by-phase", ["analyze", path, "--show-shapes", "--by-phase"]),
                      ("gemm", ["gemm", path]),
                      ("diff (file against itself)", ["diff", path, path])):
        dt, rss = run(exe + cmd)
        n = args.records * (2 if name.startswith("diff") else 1)
        print(f"{name:<34} {n / dt:>12,.0f} {n / dt / naive:>8.2f}x {rss:>8.0f} MiB")
    if not args.keep:
        os.unlink(path)
        os.unlink(os.path.join(folder, "template.jsonl"))
        os.unlink(os.path.join(folder, "template_summary.json"))
        if not args.dir:
            os.rmdir(folder)


if __name__ == "__main__":
    main()
