"""The GPU check: one command that says whether sgl_shapeprof tells the truth
and what it costs on the device it finds (`make gpu-check`).

    python benchmarks/gpu_check.py [--build] [--out DIR] [--reduced] [--only NAMES]
                                   [--deadline S] [--check-timeout S] [--build-log FILE]

With CUDA: the full check, sized to end within about 5 minutes on one H100,
the build (--build) included. Without CUDA (CI): the same checks, reduced to
tiny models on the CPU; the CUDA-only ones say "skip" with the reason.

A lent GPU gives one try, so nothing may lose the answer. Each check runs in
a child process of its own (benchmarks/gpu_checks.py) with a time limit: a
check that overruns is killed with its process group after its threads'
stacks are dumped (stacks.log), and says TIMEOUT; a crash says FAIL; the
rest still run. The whole run has a deadline (--deadline, else
$SHAPEPROF_GPU_CHECK_DEADLINE, else 420 s), the build included: a check
that would pass it is cut at it, those after it say "not run". report.json
and report.md are rewritten after every step, so even a run killed from
outside leaves what it found. A check keeps the rows it measured before an
error or a kill; an error in one model or workload is a row of its own.

Checks, in the order they run (the gate first, the riskiest last):
  native     the native module loads (a build or load failure is a FAIL and
             stops the run, with the build log's tail); versions of
             everything; one pass on the device
  parity     every call against the TorchDispatchMode reference logger:
             dense Llama-like and MoE (transformers, random weights) and a
             DiT, bf16 and fp16, eager (no_grad) and inference_mode
  graphs     a CUDA graph captured inside a logged pass: its calls recorded
             once with the replay count; outputs bitwise equal to a run
             without the profiler; the hot path never waits for the device
             (a long torch.cuda._sleep queued first stays running while 300
             logged calls are made, their kernels loaded before), with sync
             mode as the control that does
  sync       an out-of-range index_select blamed on the call that launched
             it; a graph captured inside an open sync pass still captures
  custom_ops torch.library.custom_op calls on the device recorded
  triton     Triton launches (compiled, on the GPU): a plain kernel and an
             autotuned one (Triton's own do_bench) recorded once each with
             the config that ran, none of the benchmark's operators;
             Triton's own run() outside passes; the us a launch costs off
             and in a pass, interleaved (the interpreter's path is
             tests/test_triton.py)
  kill       SIGKILL during a device run: records that parse, a summary
             that agrees with them
  cost       Llama-like (about 1B parameters in bf16 on a GPU): decode at
             batch 1 and 32, a 2k-token prefill, eager and CUDA-graph
             decode; off, armed, written, deduplicated and the Python
             logger, interleaved; the ratio to off per round, median and
             95% interval
  pytest     tests/test_cuda.py (needs pytest)
  coverage   the share of GPU kernel time and of kernel launches that the
             records explain: a dense and a MoE model under torch.profiler
             (CUPTI) in the same logged passes as the recorder; a kernel is
             explained when the op that launched it, or one it ran inside,
             is a recorded operation, or it is a recorded Triton or
             Inductor launch's kernel. Target 98%; the others by name
  timed      time="kernels" (CUPTI) against torch.profiler on the same
             decode steps, eager and CUDA-graph replays: every kernel
             torch.profiler saw is in the kernels file, at least 98% of
             kernel time under records, and each operator's kernels and
             time beside those torch.profiler puts under it (eager)
  cost_profiler
             decode at batch 1 (eager and CUDA-graph) and the prefill under
             torch.profiler(record_shapes=True) against off: CUPTI with
             graph capture and replay is the likeliest hang, so it runs
             last, alone

Report, in DIR (--out, else $SHAPEPROF_GPU_CHECK_OUT, else ./gpu-check; flat,
five files at most): report.md, report.json, build.log, stacks.log (the
dumps of checks that overran or crashed), children.log (each check's
output). Exit status 1 if a check failed, overran or did not run.

This file imports no torch (a hung CUDA call cannot be interrupted: only
its process can be killed); gpu_checks.py holds the checks.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CHILD = os.path.join(HERE, "gpu_checks.py")
# The rehearsal's hook (tests/test_gpu_check.py): "hang:kill,raise:custom_ops,
# raise:parity.dit,crash:cost" makes those steps hang, raise or abort
FAULTS_VAR = "SHAPEPROF_GPU_CHECK_FAULTS"
DEADLINE_VAR = "SHAPEPROF_GPU_CHECK_DEADLINE"
DEADLINE = 420  # s: a lease is 15 min with the machine's start, a device command at most 10
BUILD_TIMEOUT = 300
REPORT_RESERVE = 5  # s kept at the deadline for the last report
# Packages whose absence is a skip; any other import failing is a FAIL
OPTIONAL = ("transformers", "triton", "pytest")
# How the profiler's own messages begin (recording/messages.py; the
# fallback's warnings come through Python's warnings with the same words)
PREFIX = "sgl_shapeprof: "


class Check(NamedTuple):
    cuda: Optional[str]  # without CUDA: skipped, for this reason
    full: int            # s allowed on a GPU
    reduced: int         # s allowed on the CPU


CHECKS = {
    "native": Check(None, 90, 60),
    "parity": Check(None, 120, 90),
    "graphs": Check("needs CUDA graphs", 60, 60),
    "sync": Check("asynchronous device errors and graph capture need CUDA", 90, 90),
    "custom_ops": Check(None, 45, 45),
    "triton": Check("needs CUDA (Triton compiles for a GPU; the interpreter's path is tests/test_triton.py)",
                    120, 120),
    "kill": Check(None, 45, 45),
    "cost": Check(None, 120, 90),
    "pytest": Check("needs CUDA (on the CPU these are the suite's own)", 120, 120),
    "coverage": Check("needs CUDA (the kernels CUPTI traces)", 60, 60),
    "timed": Check("needs CUDA (CUPTI's kernels)", 90, 60),
    "cost_profiler": Check(None, 90, 60),
}
CAPTURE = {"guard": "the device guard (torch 2.13+)",
           "driver": "the CUDA driver's cuStreamIsCapturing (torch 2.11)",
           "none": "NONE: sync mode cannot tell a capture, so it never waits",
           "unresolved": "not resolved (no sync-mode call on a device ran)"}


def faults() -> set:
    """(kind, step) pairs that FAULTS_VAR names."""
    return {tuple(item.strip().split(":", 1)) for item in os.environ.get(FAULTS_VAR, "").split(",")
            if ":" in item}


def fault(where: str) -> None:
    """Hangs, raises or aborts (in a check's process) if FAULTS_VAR names
    this step."""
    if ("hang", where) in faults():
        while True:
            time.sleep(60)
    if ("raise", where) in faults():
        raise RuntimeError(f"injected fault at {where}")
    if ("crash", where) in faults():
        os.abort()


def kill(p: subprocess.Popen, group: bool = True) -> None:
    """Kills p, and with group its process group (p was started in a
    session of its own: what it started goes with it)."""
    try:
        if group:
            os.killpg(p.pid, signal.SIGKILL)
        else:
            p.kill()
    except (ProcessLookupError, PermissionError):
        pass
    p.wait()


def run_bounded(cmd, timeout: float, group: bool = True, **kw):
    """(exit status, output) of cmd, killed after timeout seconds (status
    None then); with group, in a session of its own, killed with all it
    started (inside a check: in the check's group, which the runner kills)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         text=True, errors="replace", start_new_session=group, **kw)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out
    except subprocess.TimeoutExpired:
        kill(p, group)
        try:
            out, _ = p.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # something outside the group holds the pipe
            out = ""
        return None, out
    finally:
        kill(p, group)


def tail(text: str, n: int) -> list:
    return text.rstrip("\n").splitlines()[-n:]


def read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


# ----------------------------------------------------------------- build --
def preflight() -> list:
    """What a build here lacks, without importing torch or using the network."""
    import importlib.util
    import sysconfig
    missing = []
    try:
        import setuptools
        if int(setuptools.__version__.split(".")[0]) < 64:
            missing.append(f"setuptools >= 64 (have {setuptools.__version__})")
    except ImportError:
        missing.append("setuptools >= 64")
    if importlib.util.find_spec("torch") is None:
        missing.append(f"torch (in {sys.executable})")
    cxx = os.environ.get("CXX", "c++").split()[0]
    if not shutil.which(cxx):
        missing.append(f"a C++ compiler ({cxx})")
    if not shutil.which(os.environ.get("CC", "cc").split()[0]):
        missing.append("a C compiler (cc)")
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        missing.append(f"Python's headers ({include}/Python.h: python3-dev)")
    return missing


def build(log: str, timeout: float) -> dict:
    """The module built in place against this Python's torch, warnings into
    the report rather than stopping it (a lease is short)."""
    missing = preflight()
    if missing:
        with open(log, "w") as f:
            f.write("cannot build here, missing: " + "; ".join(missing) + "\n")
        return {"status": "FAIL", "summary": "cannot build here, missing: " + "; ".join(missing)}
    cmd = [sys.executable, "setup.py", "-q", "build_ext", "--inplace"]
    if ("raise", "build") in faults():  # the rehearsal of a failed build
        cmd = [sys.executable, "-c", "import sys; sys.exit('error: injected fault at build')"]
    t0 = time.monotonic()
    rc, out = run_bounded(cmd, timeout, cwd=ROOT, env=dict(os.environ, SHAPEPROF_WERROR="0"))
    seconds = time.monotonic() - t0
    with open(log, "w") as f:
        f.write(out)
    warnings = warnings_of(out)
    row = {"seconds": round(seconds, 1), "warnings": warnings}
    if rc is None:
        return dict(row, status="TIMEOUT", summary=f"no build within {timeout:.0f} s")
    if rc != 0:
        return dict(row, status="FAIL", summary=f"the build failed (exit {rc})")
    return dict(row, status="pass", summary=f"built in place in {seconds:.0f} s, {len(warnings)} warnings")


def warnings_of(build_output: str) -> list:
    return [x.strip() for x in build_output.splitlines() if "warning:" in x][:20]


# ----------------------------------------------------------------- facts --
def git_commit() -> str:
    """HEAD of the checkout, '+ local changes' when there are; 'unknown'
    where the tree came without .git (a device machine's copy)."""
    if not shutil.which("git"):
        return "unknown (no git)"
    rc, head = run_bounded(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], 10)
    if rc != 0:
        return "unknown (no git checkout here)"
    rc, changes = run_bounded(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"], 10)
    return head.strip() + (" + local changes" if rc == 0 and changes.strip() else "")


def driver() -> str:
    if not shutil.which("nvidia-smi"):
        return "unknown (no nvidia-smi)"
    rc, out = run_bounded(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], 20)
    return out.strip().splitlines()[0] if rc == 0 and out.strip() else f"unknown (nvidia-smi: {rc})"


# ---------------------------------------------------------------- checks --
class Run:
    """One run: where it writes, its deadline, and the report so far."""

    def __init__(self, a, scratch: str):
        self.out, self.scratch, self.a = a.out, scratch, a
        self.start = time.monotonic()
        self.deadline = self.start + a.deadline
        self.stacks = os.path.join(a.out, "stacks.log")
        self.children = os.path.join(a.out, "children.log")
        for path in (self.stacks, self.children):  # a previous run's
            open(path, "w").close()
        self.env = dict(os.environ, PYTHONUNBUFFERED="1")
        if a.build:  # the module just built in place, whatever else is installed
            self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
        self.reduced = a.reduced
        self.report = {"result": "running", "deadline_s": a.deadline, "reduced": a.reduced,
                       "env": {"commit": git_commit(), "driver": driver(), "python_runner": sys.executable},
                       "checks": {}, "warnings": []}

    def left(self) -> float:
        return self.deadline - time.monotonic() - REPORT_RESERVE

    def add(self, name: str, row: dict) -> dict:
        self.report["checks"][name] = row
        for w in row.pop("profiler_warnings", []):
            if w not in self.report["warnings"] and len(self.report["warnings"]) < 40:
                self.report["warnings"].append(w)
        self.write()
        print(f"gpu_check: {name}: {row['status']} ({row.get('seconds', 0)} s) {row.get('summary', '')}",
              flush=True)
        return row

    def write(self) -> None:
        self.report["seconds"] = round(time.monotonic() - self.start, 1)
        self.report["sync_mode"] = sync_mode(self.report["checks"])
        for name, text in (("report.json", json.dumps(self.report, indent=1, default=str)),
                           ("report.md", markdown(self.report))):
            part = os.path.join(self.out, name + ".part")
            with open(part, "w") as f:
                f.write(text)
            os.replace(part, os.path.join(self.out, name))

    def check(self, name: str, timeout: float, cut_by_deadline: bool) -> dict:
        """Runs one check in a child of its own; its row."""
        result = os.path.join(self.scratch, f"{name}.json")
        log = os.path.join(self.scratch, f"{name}.log")
        cmd = [sys.executable, CHILD, name, "--tmp", self.scratch, "--result", result, "--stacks", self.stacks]
        cmd += ["--reduced"] if self.reduced else []
        t0 = time.monotonic()
        timed_out = False
        stacks_before = os.path.getsize(self.stacks)  # what comes after is this check's (crash or hang)
        with open(log, "wb") as f:
            p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 cwd=self.scratch, env=self.env, start_new_session=True)
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                with open(self.stacks, "a") as s:
                    s.write(f"\n== {name} (pid {p.pid}): no result after {timeout:.0f} s; its threads:\n")
                try:
                    os.kill(p.pid, signal.SIGUSR1)  # faulthandler dumps the stacks (gpu_checks.py)
                except ProcessLookupError:
                    pass
                time.sleep(0.5)
            finally:  # and whatever it left running (or all of it, if we were stopped)
                kill(p)
        seconds = round(time.monotonic() - t0, 1)
        with open(self.stacks, errors="replace") as s:
            s.seek(stacks_before)
            stack = tail(s.read().lstrip("\n"), 25)
        try:
            with open(result) as f:
                row = json.load(f)
        except (OSError, ValueError):
            row = {}
        output = read(log)
        with open(self.children, "a") as f:
            f.write(f"\n==== {name}: exit {p.returncode}, {seconds} s\n{output}")
        row["seconds"] = seconds
        row["profiler_warnings"] = [f"{name}: {line[line.index(PREFIX):].strip()}"
                                    for line in dict.fromkeys(output.splitlines()) if PREFIX in line]
        if timed_out:
            so_far = f"; so far: {row['summary']}" if row.get("summary") else ""
            why = f"cut at the run's deadline ({self.a.deadline:.0f} s)" if cut_by_deadline else \
                f"no result within {timeout:.0f} s"
            row.update(status="TIMEOUT", summary=f"{why}: killed{so_far}", stack=stack)
        elif "status" not in row:  # it died before its last word
            how = f"signal {signal.Signals(-p.returncode).name}" if p.returncode < 0 else f"exit {p.returncode}"
            so_far = f"; so far: {row['summary']}" if row.get("summary") else ""
            row.update(status="FAIL", summary=f"the check's process ended ({how}) without its result{so_far}",
                       stack=stack)
            row.setdefault("failures", []).extend(tail(output, 12))
        return row


def sync_mode(checks: dict) -> dict:
    """How sync mode told a capture, and what it decided, per check."""
    seen, per = [], {}
    for name, row in checks.items():
        for key in ("sync", "sync_blame"):
            s = row.get(key)
            if s:
                seen.append(s["capture"])
                if s["waited"] or s["capturing"] or s["unknown"]:
                    per[name + (" (its blame child)" if key == "sync_blame" else "")] = s
    paths = sorted(set(seen) - {"unresolved"}) or sorted(set(seen))
    return {"capture": paths, "per_check": per}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("SHAPEPROF_GPU_CHECK_OUT") or "gpu-check",
                    help="folder for the report (default $SHAPEPROF_GPU_CHECK_OUT, else ./gpu-check)")
    ap.add_argument("--build", action="store_true",
                    help="first build the module in place (timed, into DIR/build.log); the checks use that build")
    ap.add_argument("--build-log", help="the output of a build made before: its warnings go into the report")
    ap.add_argument("--reduced", action="store_true", help="tiny models, as without CUDA")
    ap.add_argument("--only", default="", help="comma-separated checks (native always runs first): "
                                               + ",".join(n for n in CHECKS if n != "native"))
    ap.add_argument("--deadline", type=float, default=float(os.environ.get(DEADLINE_VAR) or DEADLINE),
                    help=f"seconds for the whole run, the build included (default ${DEADLINE_VAR}, else {DEADLINE})")
    ap.add_argument("--check-timeout", type=float, help="at most this many seconds per check")
    ap.add_argument("--preflight", action="store_true", help="only say what a build here lacks")
    a = ap.parse_args()
    if a.preflight:
        missing = preflight()
        if missing:
            sys.exit("gpu_check: cannot build here, missing: " + "; ".join(missing))
        print(f"gpu_check: can build with {sys.executable}")
        return
    only = [n for n in a.only.split(",") if n]
    unknown = [n for n in only if n not in CHECKS]
    if unknown:
        sys.exit(f"gpu_check: unknown check {', '.join(unknown)} (choose from {', '.join(CHECKS)})")
    # children run in a scratch folder: every path they are given is absolute
    a.out = os.path.abspath(a.out)
    a.build_log = os.path.abspath(a.build_log) if a.build_log else None
    os.makedirs(a.out, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # so the running check is killed
    with tempfile.TemporaryDirectory(prefix="shapeprof-gpu-check-") as scratch:
        run = Run(a, scratch)
        try:
            code = checks(run, ["native"] + [n for n in CHECKS if n != "native" and (not only or n in only)])
        except (KeyboardInterrupt, SystemExit):
            run.report["result"] = "interrupted"
            run.write()
            raise
    print(read(os.path.join(a.out, "report.md")))
    sys.exit(code)


def checks(run: Run, names: list) -> int:
    a, report = run.a, run.report
    build_log = os.path.join(a.out, "build.log") if a.build else a.build_log
    if a.build:
        row = run.add("build", build(build_log, min(BUILD_TIMEOUT, run.left())))
        if row["status"] != "pass":
            return stop(run, "the build failed", build_log)
    elif build_log and os.path.exists(build_log):
        report["build_warnings"] = warnings_of(read(build_log))
    for name in names:
        spec = CHECKS[name]
        if spec.cuda and not report.get("cuda"):
            run.add(name, {"status": "skip", "summary": spec.cuda, "seconds": 0})
            continue
        left = run.left()
        budget = min(spec.reduced if run.reduced else spec.full, a.check_timeout or float("inf"))
        if left < 5:
            run.add(name, {"status": "not run", "summary": "the run's deadline had passed", "seconds": 0})
            continue
        row = run.add(name, run.check(name, min(budget, left), cut_by_deadline=left < budget))
        if name == "native":
            report["env"].update(row.pop("env", {}))
            report["cuda"] = bool(row.get("cuda"))
            run.reduced = report["reduced"] = a.reduced or not report["cuda"]
            if row["status"] != "pass":
                return stop(run, "the native module did not load", build_log)
    failed = [n for n, r in report["checks"].items() if r["status"] in ("FAIL", "TIMEOUT", "not run")]
    report["result"] = "FAIL (" + ", ".join(failed) + ")" if failed else "pass"
    run.write()
    return 1 if failed else 0


def stop(run: Run, why: str, build_log: Optional[str]) -> int:
    run.report["result"] = f"FAIL ({why}: stopped)"
    if build_log and os.path.exists(build_log):
        run.report["build_log_tail"] = tail(read(build_log), 30)
    run.write()
    return 1


# ---------------------------------------------------------------- report --
def fmt_ratio(v: dict) -> str:
    if "x_off" not in v:
        return "-"
    if v.get("lo") is None:
        return f"{v['x_off']:.3f}"
    return f"{v['x_off']:.3f} [{v['lo']:.3f}, {v['hi']:.3f}]"


def cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(report: dict) -> str:
    env, checks = report["env"], report["checks"]
    gpu = env.get("gpu")
    device = (f"{gpu}, compute capability {env.get('capability')}, {env.get('memory_gib')} GiB"
              if gpu else "CPU (no CUDA)" if "torch" in env else "unknown (the native check did not report)")
    sync = report.get("sync_mode", {})
    lines = ["# sgl_shapeprof GPU check", "",
             f"- result: **{report['result']}** in {report['seconds']:.0f} s (deadline {report['deadline_s']:.0f} s); "
             f"{'reduced (tiny models)' if report.get('reduced') else 'full'}",
             f"- device: {device}; driver {env.get('driver')}",
             f"- torch {env.get('torch', '?')} (CUDA {env.get('cuda') or 'none'}), triton {env.get('triton', '?')}, "
             f"transformers {env.get('transformers', '?')}, Python {env.get('python', '?')}",
             f"- sgl_shapeprof: commit {env.get('commit')}; package {env.get('sgl_shapeprof', '?')}; "
             f"calls recorded through DispatchKey::{env.get('dispatch_key', '?')}",
             ]
    if "build" in checks:
        b = checks["build"]
        lines.append(f"- build: {b['status']} in {b.get('seconds', 0)} s, {len(b.get('warnings', []))} warnings"
                     + "".join(f"\n  - `{w}`" for w in b.get("warnings", [])))
    elif "build_warnings" in report:
        lines.append(f"- build warnings: {len(report['build_warnings'])}"
                     + "".join(f"\n  - `{w}`" for w in report["build_warnings"]))
    if sync.get("capture"):
        lines.append("- sync mode tells a capture by: " + ", ".join(CAPTURE.get(p, p) for p in sync["capture"])
                     + "; its decisions: " + ("; ".join(
                         f"{n}: waited after {s['waited']} calls, not {s['capturing']} while capturing, "
                         f"{s['unknown']} where it could not tell" for n, s in sync["per_check"].items())
                         or "none (no sync-mode call on a device)"))
    lines += ["", "| check | result | s | what |", "|---|---|---|---|"]
    lines += [f"| {n} | {r['status']} | {r.get('seconds', 0)} | {cell(r.get('summary', ''))} |"
              for n, r in checks.items()]
    if report.get("build_log_tail"):
        lines += ["", "## build log (tail)", "", "```"] + report["build_log_tail"] + ["```"]
    for name, r in checks.items():
        if r.get("failures"):
            lines += ["", f"## {name}: failures", ""] + [f"- {cell(f)}" for f in r["failures"][:20]]
        if r.get("stack"):
            lines += ["", f"## {name}: its stack (stacks.log)", "", "```"] + r["stack"] + ["```"]
    parity = checks.get("parity", {})
    if parity.get("rows"):
        lines += ["", "## parity", "", "| model | dtype | mode | records | unexplained | explained |",
                  "|---|---|---|---|---|---|"]
        for r in parity["rows"]:
            if "records" in r:
                lines.append(f"| {r['model']} | {r['dtype']} | {r['mode']} | {r['records']} | "
                             f"{r['differences']} | {r['explained']} |")
            else:
                lines.append(f"| {r['model']} | {r['dtype']} | {r['mode']} | "
                             f"{cell(r.get('error') or r.get('skip'))} | | |")
        if parity.get("explained"):
            lines += ["", "Explained: " + "; ".join(parity["explained"])]
    lines += cost_table(checks.get("cost", {}), checks.get("cost_profiler", {}))
    tests = checks.get("pytest", {})
    if tests.get("rows"):
        lines += ["", "## pytest", "", "| test | outcome | s |", "|---|---|---|"]
        lines += [f"| {r['test']} | {r['outcome']} | {r['seconds']} |" for r in tests["rows"]]
    if report.get("warnings"):
        lines += ["", "## the profiler's messages (stderr)", ""] + [f"- `{w}`" for w in report["warnings"]]
    return "\n".join(lines) + "\n"


def cost_table(cost: dict, prof: dict) -> list:
    rows, errors = {}, {}  # per workload: cost's numbers, then torch.profiler's ratio
    for check in (cost, prof):
        for r in check.get("rows", []):
            merged = rows.setdefault(r["workload"], {})
            for k, v in r.items():
                if k == "error":
                    errors.setdefault(r["workload"], []).append(v)
                else:
                    merged.setdefault(k, v)
    if not rows:
        return []
    modes = list(cost.get("modes") or []) + list(prof.get("modes") or [])
    rounds = "; ".join(f"{c['rounds']} rounds of {c['steps']} steps ({n})" for n, c in
                       (("cost", cost), ("torch.profiler", prof)) if c.get("rounds"))
    out = ["", f"## cost: time per step over off, median [95% interval] of the rounds' ratios "
               f"(fewer than 6 rounds give no interval); {rounds}", "",
           "| workload | off ms/step | " + " | ".join(modes) + " |", "|---" * (len(modes) + 2) + "|"]
    for label, r in rows.items():
        if set(r) - {"workload"}:
            off = f"{r['off_ms']:.2f}" if "off_ms" in r else "-"
            out.append(f"| {label} | {off} | " + " | ".join(fmt_ratio(r.get(m, {})) for m in modes) + " |")
        out += [f"| {label} | {cell(e)} |" + " |" * len(modes) for e in errors.get(label, [])]
    return out


if __name__ == "__main__":
    main()
