"""What the zero-edit start-up hook (sgl_shapeprof_autohook.pth) costs at
interpreter start-up when SGLANG_PROFILE_SHAPES is unset, and when it is set.

    python benchmarks/startup.py [--runs 40]

Each run starts a fresh interpreter that processes a site folder with the
hook and one without (interleaved); medians, in the same run.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PTH = os.path.join(ROOT, "sgl_shapeprof", "sgl_shapeprof_autohook.pth")
CODE = "import site, sys; site.addsitedir(sys.argv[1])"


def start_once(site_dir, env):
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", CODE, site_dir], env=env, check=True)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=40)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        plain, hooked = os.path.join(d, "plain"), os.path.join(d, "hooked")
        os.makedirs(plain)
        os.makedirs(hooked)
        shutil.copy(PTH, hooked)
        base_env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_PROFILE_SHAPES")}
        base_env["PYTHONPATH"] = ROOT
        on_env = dict(base_env, SGLANG_PROFILE_SHAPES="1")
        rows = {"no hook": (plain, base_env), "hook, variable unset": (hooked, base_env),
                "hook, SGLANG_PROFILE_SHAPES=1": (hooked, on_env)}
        times = {k: [] for k in rows}
        for _ in range(args.runs):
            for k, (site_dir, env) in rows.items():
                times[k].append(start_once(site_dir, env))
    base = statistics.median(times["no hook"])
    print(f"interpreter start-up, median of {args.runs} interleaved runs (python {sys.version.split()[0]})")
    for k, v in times.items():
        m = statistics.median(v)
        print(f"  {k:32} {m * 1e3:7.2f} ms  ({(m - base) * 1e3:+.2f} ms)")


if __name__ == "__main__":
    main()
