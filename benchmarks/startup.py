"""What the zero-edit start-up hook (sgl_shapeprof_autohook.pth and the module
it imports, sgl_shapeprof_autohook.py) costs at
interpreter start-up when SGLANG_PROFILE_SHAPES is unset, and when it is set.

    python benchmarks/startup.py [--runs 40] [--imports]

Each run starts a fresh interpreter that processes a site folder with the
hook and one without (interleaved); medians, in the same run. Unset, the
hook leaves a finder in sys.meta_path that every later import asks first:
--imports adds rows that then import a few dozen standard modules.
"""
import argparse
import os
import py_compile
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PTH = os.path.join(ROOT, "sgl_shapeprof", "sgl_shapeprof_autohook.pth")
MODULE = os.path.join(ROOT, "sgl_shapeprof_autohook.py")
CODE = "import site, sys; site.addsitedir(sys.argv[1])"
IMPORTS = "; import asyncio, json, logging, email.mime.text, http.client, unittest, argparse"


def start_once(site_dir, env, code=CODE):
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, site_dir], env=env, check=True)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--imports", action="store_true", help="also rows that import standard modules after start-up")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        plain, hooked = os.path.join(d, "plain"), os.path.join(d, "hooked")
        os.makedirs(plain)
        os.makedirs(hooked)
        shutil.copy(PTH, hooked)
        if os.path.exists(MODULE):  # builds before the module had the line only
            # compiled, as pip compiles what it installs (and the copy on
            # PYTHONPATH, found first)
            shutil.copy(MODULE, hooked)
            py_compile.compile(os.path.join(hooked, os.path.basename(MODULE)))
            py_compile.compile(MODULE)
        base_env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_PROFILE_SHAPES")}
        base_env["PYTHONPATH"] = ROOT
        on_env = dict(base_env, SGLANG_PROFILE_SHAPES="1")
        rows = {"no hook": (plain, base_env, CODE), "hook, variable unset": (hooked, base_env, CODE),
                "hook, SGLANG_PROFILE_SHAPES=1": (hooked, on_env, CODE)}
        if args.imports:
            rows.update({"no hook, + imports": (plain, base_env, CODE + IMPORTS),
                         "hook, variable unset, + imports": (hooked, base_env, CODE + IMPORTS)})
        times = {k: [] for k in rows}
        for _ in range(args.runs):
            for k, (site_dir, env, code) in rows.items():
                times[k].append(start_once(site_dir, env, code))
    print(f"interpreter start-up, median of {args.runs} interleaved runs (python {sys.version.split()[0]})")
    for k, v in times.items():
        base = statistics.median(times["no hook, + imports" if "imports" in k else "no hook"])
        m = statistics.median(v)
        print(f"  {k:34} {m * 1e3:7.2f} ms  ({(m - base) * 1e3:+.2f} ms)")


if __name__ == "__main__":
    main()
