"""Byte-for-byte check that a refactor changed no output: a pinned baseline
build against the working tree, on the same workloads and the same records
files.

    .venv/bin/python benchmarks/same_output.py --base HEAD
    .venv/bin/python benchmarks/same_output.py --base a1681fe --keep /tmp/same-output

The baseline ref is checked out into a temporary git worktree and its
extension built there in place (ab.py's build_baseline, a minute or two);
the working tree must be built already (make install). Every command runs
in a fresh interpreter as `python -m sgl_shapeprof ...` with PYTHONPATH set
to its build's tree (the venv's editable install comes after PYTHONPATH on
the import path); each build's sgl_shapeprof and _C are checked to come from
its tree before anything runs.

1. Records: each build records the same workloads into its own folder:
   the demo command, and `record` over a small script running the demo's
   models (plain, deduplicated, with arguments, a phase filter with skipped
   and limited passes, diffusion, two ranks, calls that raise, an uncaught
   exception, a process killed inside a call, a size cap). The records
   files (.jsonl) must be byte-identical; the summaries too once what
   varies between two runs of the same build is replaced (see
   SUMMARY_VOLATILE_KEYS); the recording commands' exit status and output
   must match as well.
2. Commands: over the baseline's records (both builds read the very same
   files), a matrix of analyze, diff, gemm, tune, cost, report, repro,
   replay (only --compare and the paths that stop before timing: replay's
   timings are measurements), record's and the other commands' argument
   errors, and every command's --help: default text, --json, --csv, filters,
   and bad input (missing or broken files, bad option values, an output
   that exists). Each run has an empty folder of its own as its working
   directory; its exit status, stdout, stderr and every file it wrote are
   compared, after each run's own folder is replaced by <OUT>, each
   build's tree by <TREE> (a traceback's frames inside it folded into one
   line: where code sits is no output), and the report's generation time
   and plot ids by placeholders. Against a baseline whose `diff` left
   rows that tie in its sort in hash order (before its ties were ordered by
   text), --unordered-diff lists diff's runs that differ only in order
   instead of failing them (TIE_ORDER_COMMANDS).

Prints one line when everything matched; otherwise each difference (the
command line, what differs, a short unified diff) and exits 1. It is a
check run before a refactor lands, not a test (it takes a few minutes).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import difflib
import gzip
import importlib.util
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _load_ab():
    """benchmarks/ab.py as a module (for build_baseline): benchmarks/ is not a package."""
    spec = importlib.util.spec_from_file_location("shapeprof_bench_ab", os.path.join(HERE, "ab.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_baseline = _load_ab().build_baseline

# The summary keys that differ between two runs of the same build (found by
# recording every workload twice with one build, in two folders, and diffing
# the summaries), with why. They are not dropped: the part that varies is
# replaced before the byte comparison. The C core writes the summary
# (sp_summary.c) with no time or duration in it; "worker"'s "host" would vary
# between machines, but both builds run on this one, so it is compared.
SUMMARY_VOLATILE_KEYS = {
    # each build records into a folder of its own: the folder is replaced
    # by <RECORDS>, the file's name within it still compared
    "records_file": "the records file's absolute path",
    # `record`'s profiler comes from from_env(), which names its Worker,
    # this process's pid among the rest: a new one every run
    "worker.pid": "the recording process's id",
}


def normalize_summary(data: bytes, folder: str) -> bytes:
    """A summary with SUMMARY_VOLATILE_KEYS' varying parts replaced."""
    data = re.sub(rb'(\n  "records_file": ")' + re.escape(folder.encode()) + rb"/", rb"\1<RECORDS>/", data)
    return re.sub(rb'(\n  "worker": \{[^\n]*"pid": )\d+', rb"\1<PID>", data)


# The environment of every child: one thread (deterministic reductions and
# kernel choices), a fixed terminal width (argparse wraps --help to it), and
# no profiling switch inherited from the caller's shell.
CHILD_ENV_SET = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "COLUMNS": "80", "LC_ALL": "C.UTF-8",
                 "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONFAULTHANDLER": ""}
CHILD_ENV_DROP_PREFIXES = ("SHAPEPROF", "SGLANG_PROFILE_SHAPES", "PYTORCH_TUNABLEOP")

# The program `record` runs (written once into the shared folder, so both
# builds run the same file); sys.argv[1] names the workload. The models come
# from the build's own sgl_shapeprof.demo, as the demo command's do.
WORKLOAD = r'''
import os, signal, sys
import torch
torch.set_num_threads(1)
import sgl_shapeprof
from sgl_shapeprof.demo import models

prof = sgl_shapeprof.from_env()  # the profiler `record` set up
what = sys.argv[1]
rank = int(os.environ.get("RANK", "0"))


def llama(decode_steps=3, batch=2):
    models.run_llama(models.make_llama(torch.float32), prof, batch=batch, decode_steps=decode_steps)


def raising_calls(phases=("prefill", "decode", "decode")):
    a, b = torch.ones(2, 3), torch.ones(4, 5)
    for phase in phases:
        prof.start_forward_pass(phase)
        torch.relu(a)
        for bad in (lambda: torch.mm(a, b), lambda: torch.cat([a, b])):
            try:
                bad()
            except RuntimeError:
                pass
        prof.end_forward_pass()


with torch.inference_mode():
    if what == "llama":
        llama()
    elif what == "llama-long":
        llama(decode_steps=6)
    elif what == "llama-rank":
        llama(batch=2 + rank)
    elif what == "diffusion":
        models.run_diffusion(models.make_unet(), prof, passes=2, steps=4)
    elif what == "errors":
        raising_calls()
    elif what == "uncaught":
        llama(decode_steps=1)
        raise ValueError("the workload fails on purpose")
    elif what == "crash":
        lib = torch.library.Library("same_output", "DEF")
        lib.define("die(Tensor x) -> Tensor")
        lib.impl("die", lambda x: os.kill(os.getpid(), signal.SIGKILL), "CPU")
        llama(decode_steps=1)
        prof.start_forward_pass("decode")
        torch.relu(torch.ones(3, 5))
        torch.ops.same_output.die(torch.ones(2, 9, dtype=torch.bfloat16))
    else:
        sys.exit(f"unknown workload {what!r}")
'''


@dataclass
class Recording:
    """One recording, made with each build: `sgl-shapeprof ARGV` run in the
    build's records folder ({work}: the workload script's path)."""
    name: str
    argv: List[str]
    env: Dict[str, str] = field(default_factory=dict)


RECORDINGS = [
    Recording("demo", ["demo", "--dir", "demo", "--decode-steps", "3", "--steps", "4"]),
    Recording("plain", ["record", "-o", "plain.jsonl", "--", "python", "{work}", "llama"]),
    # the script.py form (no python first): record runs it with its own interpreter
    Recording("dedupe", ["record", "--dedupe", "-o", "dedupe.jsonl", "--", "{work}", "llama"]),
    Recording("args", ["record", "--args", "-o", "args.jsonl", "--", "python", "{work}", "llama"]),
    Recording("phases", ["record", "--skip-warmup", "1", "--log-n-passes", "3", "-o", "phases.jsonl",
                         "--", "python", "{work}", "llama-long"], env={"SHAPEPROF_PHASES": "decode"}),
    Recording("diffusion", ["record", "--dedupe", "--args", "-o", "diffusion.jsonl", "--", "python",
                            "{work}", "diffusion"]),
    # two ranks of one deployment, as torchrun would start them ({rank} filled in)
    Recording("rank0", ["record", "-o", "multi/shapes.rank{rank}.jsonl", "--", "python", "{work}",
                        "llama-rank"], env={"RANK": "0"}),
    Recording("rank1", ["record", "-o", "multi/shapes.rank{rank}.jsonl", "--", "python", "{work}",
                        "llama-rank"], env={"RANK": "1"}),
    Recording("errors", ["record", "--args", "-o", "errors.jsonl", "--", "python", "{work}", "errors"]),
    Recording("uncaught", ["record", "-o", "uncaught.jsonl", "--", "python", "{work}", "uncaught"]),
    Recording("crash", ["record", "--args", "-o", "crash.jsonl", "--", "python", "{work}", "crash"]),
    Recording("capped", ["record", "--max-mb", "0.03", "-o", "capped.jsonl", "--", "python", "{work}",
                         "llama"]),
]


@dataclass
class Case:
    """One command run with each build: `sgl-shapeprof ARGV` in an empty
    folder, where `existing` files are made first (with "old\\n") to test
    what a command does with an output that exists."""
    argv: List[str]
    existing: Tuple[str, ...] = ()


@dataclass
class Result:
    rc: int
    stdout: bytes
    stderr: bytes
    files: Dict[str, bytes]  # what the run left in its folder, by relative path


def child_env(tree: str, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(CHILD_ENV_DROP_PREFIXES)}
    env.update(CHILD_ENV_SET)
    env["PYTHONPATH"] = tree
    env.update(extra or {})
    return env


def sgl(tree: str, argv: List[str], cwd: str, extra_env: Optional[Dict[str, str]] = None,
        timeout: float = 300) -> Result:
    """`python -m sgl_shapeprof ARGV` with tree's build, in cwd; the files
    cwd holds afterwards come back with the output."""
    try:
        r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", *argv], cwd=cwd, env=child_env(tree, extra_env),
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
        rc, out, err = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = 124, e.stdout or b"", (e.stderr or b"") + f"\n[timed out after {timeout}s]".encode()
    return Result(rc, out, err, read_folder(cwd))


def read_folder(folder: str) -> Dict[str, bytes]:
    """Every file under folder by relative path; an archive (tar, zip) as
    its members (ARCHIVE!member), whose bytes hold times of writing."""
    files: Dict[str, bytes] = {}
    for dirpath, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, folder)
            with open(path, "rb") as f:
                data = f.read()
            members = archive_members(name, data)
            if members is None:
                files[rel] = data
            else:
                files.update({f"{rel}!{m}": d for m, d in members.items()})
                files[f"{rel}!"] = b"\n".join(sorted(m.encode() for m in members))  # the member list
    return files


def archive_members(name: str, data: bytes) -> Optional[Dict[str, bytes]]:
    try:
        if name.endswith((".tar.gz", ".tgz", ".tar")):
            with tarfile.open(fileobj=io.BytesIO(data)) as t:
                return {m.name: (t.extractfile(m).read() if m.isfile() else b"<" + m.type + b">")
                        for m in t.getmembers()}
        if name.endswith(".zip"):
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                return {n: z.read(n) for n in z.namelist()}
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError):
        return None  # not an archive after all: compared as bytes
    return None


# The report's header holds the time it was made (render/html.py's _header).
REPORT_TIME = re.compile(rb"(<p class=meta>sgl_shapeprof [^,<]*, )\d{4}-\d\d-\d\d \d\d:\d\d")
# The demo prints how long each recording took.
DEMO_SECONDS = re.compile(rb" in \d+\.\d\ds$", re.M)


# A traceback's frames inside the build's own tree (after <TREE> is put in):
# where the code sits is no output (a refactor moves it); the exception and
# the frames outside the package (the workload's) are still compared.
TREE_FRAMES = re.compile(rb'(?:  File "<TREE>/[^"\n]*", line \d+, in [^\n]*\n(?:    [^\n]*\n)?(?: *[~^]+ *\n)?)+')


# The report's plots: plotly names each figure's <div> with a random UUID
# (uuid4 in plotly's to_html), so each is numbered in order of appearance.
UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def normalize(data: bytes, places: List[Tuple[str, str]]) -> bytes:
    """data with each (path, placeholder) replaced, the longest path first,
    traceback frames in the build's tree folded into one line, and the
    report's generation time and plot ids taken out."""
    for path, placeholder in sorted(places, key=lambda p: -len(p[0])):
        data = data.replace(path.encode(), placeholder.encode())
    data = TREE_FRAMES.sub(b'  File "<TREE>/...": frames of the build\n', data)
    ids: Dict[bytes, bytes] = {}
    data = UUID.sub(lambda m: ids.setdefault(m.group(), b"<UUID%d>" % (len(ids) + 1)), data)
    return REPORT_TIME.sub(rb"\1<TIME>", data)


# Commands whose order of equal rows was not defined in older builds
# (--unordered-diff): `diff` sorted its signatures by (operation, -count)
# and its changes by (-delta, operation), leaving ties in the order of a set
# of signature keys, which follows their hashes: hash(None) is None's
# address before Python 3.12, so it varied from run to run of one build.
# Ties are ordered by the signatures' text since.
TIE_ORDER_COMMANDS = ("diff",)


def canonical(data: bytes) -> bytes:
    """data with its order taken out: JSON with every list sorted, else its
    lines sorted."""
    try:
        value = json.loads(data)
    except ValueError:
        return b"\n".join(sorted(data.split(b"\n")))

    def sort_lists(v):
        if isinstance(v, dict):
            return {k: sort_lists(x) for k, x in v.items()}
        if isinstance(v, list):
            return sorted((sort_lists(x) for x in v), key=lambda x: json.dumps(x, sort_keys=True))
        return v
    return json.dumps(sort_lists(value), sort_keys=True).encode()


def first_difference(a: bytes, b: bytes) -> str:
    """The first line where two byte strings differ, as 'line N: A | B'."""
    la, lb = a.split(b"\n"), b.split(b"\n")
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return f"line {i + 1}:\n  base: {shorten(x)}\n  work: {shorten(y)}"
    return f"line {min(len(la), len(lb)) + 1}: one ends ({len(la)} vs {len(lb)} lines)"


def shorten(line: bytes, width: int = 300) -> str:
    s = line.decode("utf-8", "replace")
    return s if len(s) <= width else s[:width] + f"... ({len(s)} chars)"


def short_diff(a: bytes, b: bytes, lines: int = 24) -> str:
    if b"\0" in a or b"\0" in b:
        return f"  (binary, {len(a)} vs {len(b)} bytes)"
    d = list(difflib.unified_diff(a.decode("utf-8", "replace").splitlines(),
                                  b.decode("utf-8", "replace").splitlines(), "base", "work", lineterm="", n=1))
    more = f"\n  ... {len(d) - lines} more diff lines" if len(d) > lines else ""
    return "\n".join("  " + shorten(x.encode(), 240) for x in d[:lines]) + more


def stale_build(tree: str) -> Optional[str]:
    """Why tree's _C may not be built from its C sources (a file of csrc/
    or setup.py changed after it), or None."""
    pkg = os.path.join(tree, "sgl_shapeprof")
    built = max(os.path.getmtime(os.path.join(pkg, n)) for n in os.listdir(pkg)
                if n.startswith("_C") and n.endswith(".so"))
    sources = [os.path.join(tree, "setup.py")] + [os.path.join(d, n) for d, _, names in
                                                  os.walk(os.path.join(tree, "csrc")) for n in names]
    newer = sorted(os.path.relpath(p, tree) for p in sources if os.path.getmtime(p) > built)
    if not newer:
        return None
    return (f"{tree}'s _C is older than {', '.join(newer[:4])}{' ...' if len(newer) > 4 else ''}: "
            f"those changes are not compared until it is rebuilt (make install)")


def check_imports(tree: str, cwd: str) -> None:
    """Each build's children must import sgl_shapeprof (and its _C) from its
    own tree, not the venv's editable install of the checkout."""
    code = "import sgl_shapeprof, sgl_shapeprof._C as c; print(sgl_shapeprof.__file__); print(c.__file__)"
    r = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=child_env(tree), capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"same_output.py: cannot import sgl_shapeprof from {tree}:\n{r.stderr[-2000:]}")
    real = os.path.realpath(tree) + os.sep
    for path in r.stdout.split():
        print(f"  {path}", file=sys.stderr)
        if not os.path.realpath(path).startswith(real):
            raise SystemExit(f"same_output.py: a child with PYTHONPATH={tree} imported {path}")


# --------------------------------------------------------------------------
# Step 1: records
# --------------------------------------------------------------------------
def record_all(tree: str, folder: str, work: str) -> Dict[str, Result]:
    """Every RECORDING with tree's build, into folder; the run's output by name."""
    os.makedirs(os.path.join(folder, "multi"), exist_ok=True)
    results = {}
    for rec in RECORDINGS:
        argv = [a.replace("{work}", work) for a in rec.argv]
        argv = [sys.executable if a == "python" else a for a in argv]
        results[rec.name] = sgl(tree, argv, folder, rec.env)
    return results


def compare_recordings(trees: Dict[str, str], folders: Dict[str, str], runs: Dict[str, Dict[str, Result]],
                       differences: List[str]) -> int:
    """Compares the two builds' records folders (the .jsonl byte for byte,
    the summaries with SUMMARY_VOLATILE_KEYS' folder replaced) and the
    recording commands' outputs; returns how many files were compared."""
    places = {b: [(folders[b], "<RECORDS>"), (trees[b], "<TREE>"), (sys.prefix, "<VENV>")] for b in folders}
    for rec in RECORDINGS:
        a, b = runs["base"][rec.name], runs["work"][rec.name]
        what = f"recording {rec.name}: sgl-shapeprof {' '.join(rec.argv)}"
        compare_result(what, a, b, places["base"], places["work"], differences, files=False)
    files = {b: read_folder(folders[b]) for b in folders}
    names = sorted(set(files["base"]) | set(files["work"]))
    for name in names:
        if name not in files["base"] or name not in files["work"]:
            differences.append(f"records {name}: only written by {'base' if name in files['base'] else 'work'}")
            continue
        a, b = files["base"][name], files["work"][name]
        if name.endswith("_summary.json"):
            a, b = normalize_summary(a, folders["base"]), normalize_summary(b, folders["work"])
        if a != b:
            differences.append(f"records {name}: differs at {first_difference(a, b)}")
    return len(names)


# --------------------------------------------------------------------------
# Step 2: commands
# --------------------------------------------------------------------------
def make_inputs(base_tree: str, records: str, inputs: str) -> None:
    """Inputs that no recording makes, derived once from the baseline's
    records (both builds then read them): a gzipped copy, broken files, two
    replay CSVs for replay --compare, a TunableOp results file."""
    os.makedirs(inputs, exist_ok=True)
    with open(os.path.join(records, "plain.jsonl"), "rb") as f:
        plain = f.read()
    with open(os.path.join(inputs, "plain.jsonl.gz"), "wb") as f:
        f.write(gzip.compress(plain, mtime=0))
    with open(os.path.join(inputs, "plain.jsonl.zst"), "wb") as f:
        f.write(b"(not zstd)\n")
    with open(os.path.join(inputs, "cut.jsonl"), "wb") as f:
        f.write(plain[:len(plain) // 2])  # a line cut in the middle, no summary
    with open(os.path.join(inputs, "empty.jsonl"), "wb"):
        pass
    with open(os.path.join(inputs, "garbage.jsonl"), "wb") as f:
        f.write(b"this is not JSON\n{\"call_id\": 1}\n")
    with open(os.path.join(inputs, "notes.txt"), "wb") as f:
        f.write(b"operation,count\n")
    os.makedirs(os.path.join(inputs, "configs"), exist_ok=True)
    # replay's timings are measurements: two replays made once by the
    # baseline, then both builds compare the same two CSVs
    for name in ("A.csv", "B.csv"):
        r = sgl(base_tree, ["replay", os.path.join(records, "args.jsonl"), "--top", "6", "--warmup", "0",
                            "--iterations", "2", "--csv", os.path.join(inputs, name)], inputs)
        if r.rc != 0:
            raise SystemExit(f"same_output.py: cannot make {name} for replay --compare:\n"
                             f"{r.stderr.decode()[-2000:]}")
    r = sgl(base_tree, ["gemm", os.path.join(records, "args.jsonl"), "--tunableop",
                        os.path.join(inputs, "untuned.csv")], inputs)
    if r.rc != 0:
        raise SystemExit(f"same_output.py: cannot make untuned.csv:\n{r.stderr.decode()[-2000:]}")
    with open(os.path.join(inputs, "untuned.csv")) as f:
        entries = [line.strip() for line in f if line.strip()]
    with open(os.path.join(inputs, "tunableop_results0.csv"), "w") as f:
        f.write("Validator,PT_VERSION,2.13.0\n")
        for line in entries[::2]:  # every other GEMM tuned
            f.write(f"{line},Gemm_Hipblaslt_1234,0.0125\n")


def command_matrix(records: str, inputs: str) -> List[Case]:
    """The command runs of step 2, over the baseline's records folder and
    the derived inputs."""
    def r(name):
        return os.path.join(records, name)

    def i(name):
        return os.path.join(inputs, name)

    cases: List[Case] = []

    def add(*argv, existing=()):
        cases.append(Case(list(argv), tuple(existing)))

    llm, diffusion = r("demo/llm_shapes.jsonl"), r("demo/diffusion_shapes.jsonl")
    plain, dedupe, args, phases = r("plain.jsonl"), r("dedupe.jsonl"), r("args.jsonl"), r("phases.jsonl")
    errors, crash, uncaught, capped = r("errors.jsonl"), r("crash.jsonl"), r("uncaught.jsonl"), r("capped.jsonl")
    rank0, rank1 = r("multi/shapes.rank0.jsonl"), r("multi/shapes.rank1.jsonl")
    ranks_glob, ranks_folder = r("multi/shapes.rank*.jsonl"), r("multi")
    every_file = [llm, diffusion, plain, dedupe, args, phases, r("diffusion.jsonl"), errors, crash, uncaught,
                  capped, rank0, rank1, ranks_glob, ranks_folder, i("plain.jsonl.gz"), i("cut.jsonl")]
    some_files = [llm, diffusion, dedupe, phases, crash, ranks_glob]
    missing = r("no-such-file.jsonl")
    broken = [missing, i("empty.jsonl"), i("garbage.jsonl"), i("notes.txt"), i("plain.jsonl.zst"),
              r("plain_summary.json"), r("nothing*.jsonl"), inputs + "/configs"]
    filters = [["--filter-op", "linear"], ["--filter-op", "^aten\\.(mul|add)\\."], ["--phase", "decode"],
               ["--phase", "prefill"], ["--passes", "2-3"], ["--passes", "2-"], ["--passes", "1"],
               ["--min-elements", "1000"], ["--max-entries", "40"], ["--phase", "nosuchphase"]]
    bad_filters = [["--filter-op", "(unclosed"], ["--passes", "3-1"], ["--passes", "x"], ["--passes", "0"],
                   ["--min-elements", "-1"], ["--max-entries", "many"]]

    # analyze
    for f in every_file:
        add("analyze", f)
        add("analyze", f, "--json")
    for f in some_files:
        for opts in (["--show-shapes"], ["--show-shapes", "--max-shapes", "2"], ["--by-phase"], ["--quick"],
                     ["--top", "3"], ["--no-summary", "--no-largest", "--no-diversity"],
                     ["--quick", "--json"], ["--by-phase", "--json"]):
            add("analyze", f, *opts)
    for opts in filters:
        add("analyze", llm, *opts)
        add("analyze", ranks_glob, "--json", *opts)
    for f in (crash, uncaught, i("cut.jsonl")):
        for opts in (["--tail", "3"], ["--tail", "0"], ["--tail", "50", "--json"]):
            add("analyze", f, *opts)
    add("analyze", plain, dedupe, args)
    add("analyze", plain, "--timeline", "timeline.csv")
    add("analyze", llm, "--phase", "decode", "--timeline", "timeline.csv")
    add("analyze", plain, "--timeline", "timeline.csv", existing=["timeline.csv"])
    add("analyze", plain, "--timeline", "timeline.csv", "--force", existing=["timeline.csv"])
    for f in broken:
        add("analyze", f)
    for opts in bad_filters + [["--top", "-2"], ["--max-shapes", "x"], ["--tail", "-1"], ["--bogus"]]:
        add("analyze", plain, *opts)
    add("analyze")

    # diff
    pairs = [(plain, dedupe), (plain, args), (plain, phases), (rank0, rank1), (llm, plain), (plain, plain),
             (r("diffusion.jsonl"), diffusion), (errors, crash), (ranks_glob, plain), (plain, i("plain.jsonl.gz"))]
    for a, b in pairs:
        add("diff", a, b)
        add("diff", a, b, "--json")
    for opts in (["--by-phase"], ["--shapes-only"], ["--top", "2"], ["--shapes-only", "--json"]) + tuple(filters[:6]):
        add("diff", plain, phases, *opts)
        add("diff", rank0, rank1, *opts)
    for a, b in ((plain, missing), (missing, plain), (plain, i("garbage.jsonl")), (i("empty.jsonl"), plain)):
        add("diff", a, b)
    add("diff", plain)
    add("diff", plain, dedupe, "--top", "x")

    # gemm
    for f in (llm, plain, args, diffusion, r("diffusion.jsonl"), ranks_glob, errors, i("plain.jsonl.gz")):
        add("gemm", f)
        add("gemm", f, "--csv")
        add("gemm", f, "--json")
    for opts in (["--top", "2"], ["--op", "aten.linear.default"], ["--op", "aten.mul.Tensor:self,other"],
                 ["--phase", "decode", "--csv"], ["--filter-op", "linear", "--json"], ["--passes", "1"]):
        add("gemm", llm, *opts)
    add("gemm", args, "--tunableop", "gemms.csv")
    add("gemm", llm, "--tunableop", "gemms.csv")
    add("gemm", args, "--tunableop", "gemms.csv", existing=["gemms.csv"])
    add("gemm", args, "--tunableop", "gemms.csv", "--force", existing=["gemms.csv"])
    add("gemm", args, "--tunableop", "no-such-folder/gemms.csv")
    for f in broken[:4]:
        add("gemm", f)
    add("gemm", plain, "--csv", "--json")
    add("gemm", plain, "--op", "")
    add("gemm", plain, "--top", "-1")

    # tune
    for f in (llm, plain, args, ranks_glob, diffusion):
        add("tune", f, "--device", "H200")
        add("tune", f, "--device", "H200", "--json")
        add("tune", f, "--device", "H200", "--csv")
    for opts in (["--cuda-graph-bs"], ["--cuda-graph-bs", "80"], ["--cuda-graph-bs", "--json"],
                 ["--configs", i("configs"), "--triton", "3.1.0"],
                 ["--model", "org/model", "--tp-size", "2", "--ep-size", "2"],
                 ["--fail-under", "50"], ["--phase", "decode"],
                 ["--tunableop-results", i("tunableop_results0.csv")],
                 ["--tunableop-results", i("tunableop_results0.csv"), "--json"],
                 ["--tunableop-results", i("tunableop_results0.csv"), "--tunableop-untuned", "left.csv"],
                 ["--tunableop-untuned", "all.csv"]):
        add("tune", args, "--device", "H200", *opts)
    add("tune", args, "--device", "NVIDIA H100 80GB HBM3")
    add("tune", args, "--device", "B200", "--cuda-graph-bs")
    add("tune", args, "--device", "H200", "--tunableop-untuned", "all.csv", existing=["all.csv"])
    for opts in (["--device", "NoSuchGPU"], ["--device", "H"], [], ["--device", "H200", "--fail-under", "x"],
                 ["--device", "H200", "--cuda-graph-bs", "120"], ["--device", "H200", "--configs", missing],
                 ["--device", "H200", "--tunableop-results", i("notes.txt")],
                 ["--device", "H200", "--tunableop-results", missing], ["--device", "H200", "--tp-size", "0"]):
        add("tune", args, *opts)
    add("tune", missing, "--device", "H200")

    # cost (it imports torch: fewer runs)
    for f in (llm, plain, diffusion, ranks_glob, errors):
        add("cost", f)
    for opts in (["--json"], ["--csv"], ["--gpu", "H100"], ["--gpu", "MI300X", "--by-op"], ["--by-op", "--csv"],
                 ["--peak-tflops", "100", "--bandwidth", "2"], ["--top", "3", "--gpu", "B200"],
                 ["--phase", "decode", "--json"], ["--gpu", "NoSuchGPU"], ["--peak-tflops", "x"],
                 ["--peak-tflops", "100"]):
        add("cost", llm, *opts)
    add("cost", missing)

    # report (HTML; it imports plotly: a few runs)
    add("report", llm)
    add("report", plain, dedupe, "-o", "two.html")
    add("report", ranks_folder, "--gpu", "B200", "-o", "ranks.html")
    add("report", args, "--tune-device", "H200", "--configs", i("configs"), "-o", "tune.html")
    add("report", llm, "--phase", "decode", "--filter-op", "linear", "-o", "filtered.html")
    add("report", crash, "-o", "crash.html")
    add("report", llm, existing=["shapes_report.html"])
    add("report", llm, "--force", existing=["shapes_report.html"])
    add("report", missing)
    add("report", llm, "--gpu", "NoSuchGPU")

    # repro (writes scripts; --run runs them, each in a fresh interpreter)
    add("repro", errors)
    add("repro", crash)
    add("repro", crash, "-o", "scripts")
    add("repro", args, "--call", "1", "--call", "57", "-o", "scripts")
    add("repro", llm, "--filter-op", "linear", "--passes", "2", "-o", "scripts")
    add("repro", errors, "--errors", "--phase", "decode")
    add("repro", errors, "--bundle", "bundle")
    add("repro", crash, "--bundle", "bundle.tar.gz")
    add("repro", errors, "--bundle", "bundle.zip")
    add("repro", errors, "--run", "--timeout", "120")
    add("repro", errors, existing=["repro/.keep"])
    add("repro", errors, "--force", existing=["repro/.keep"])
    add("repro", plain)
    add("repro", plain, "--call", "3")
    add("repro", args, "--call", "999999")
    add("repro", args, "--call", "x")
    add("repro", args)
    add("repro", missing)
    add("repro", args, "--import", "no_such_module_here")

    # replay: only what does not time calls
    a_csv, b_csv = i("A.csv"), i("B.csv")
    add("replay", "--compare", a_csv, b_csv)
    add("replay", "--compare", b_csv, a_csv, "--top", "2")
    add("replay", "--compare", a_csv, a_csv)
    add("replay", "--compare", a_csv, i("notes.txt"))
    add("replay", "--compare", a_csv, missing)
    add("replay", "--compare", a_csv, b_csv, args)
    add("replay", args, "--filter-op", "nosuchop")
    add("replay", args, "--phase", "nosuchphase")
    add("replay", plain)
    add("replay")
    add("replay", missing)
    add("replay", args, "--warmup", "-1")
    add("replay", args, "--iterations", "0")
    add("replay", args, "--threads", "0")
    add("replay", args, "--device", "cuda:7")
    add("replay", args, "--device", "nosuchdevice")
    add("replay", args, "--csv", "--json")
    add("replay", args, "--csv", "out.csv", existing=["out.csv"])

    # record, run, request, hook: their argument errors and read-only answers
    add("record")
    add("record", "-o", "x.jsonl")
    add("record", "-o", "x.jsonl", "--", "ls", "-l")
    add("record", "-o", "x.jsonl", "--", "python")
    add("record", "-o", "no-such-folder/x.jsonl", "--", "python", "x.py")
    add("record", "--max-mb", "-1", "--", "python", "x.py")
    add("record", "--max-mb", "lots", "--", "python", "x.py")
    add("record", "--skip-warmup", "x", "--", "python", "x.py")
    add("run")
    add("run", "--server", "nosuchserver", "--model-path", "m")
    add("request", "not-a-pid")
    add("request", "--passes", "-3", "1")
    add("hook", "status")
    add("hook", "status", "--site-dir", ".")
    add("hook", "frobnicate")
    add("demo", "--steps", "x")
    add("--version")
    add()
    add("nosuchcommand")

    # every command's help
    for cmd in ("analyze", "diff", "gemm", "tune", "cost", "report", "replay", "repro", "record", "run",
                "request", "hook", "demo"):
        add(cmd, "--help")
    add("--help")
    return cases


def run_matrix(trees: Dict[str, str], cases: List[Case], out: str, jobs: int) -> Dict[Tuple[int, str], Result]:
    """Each case with each build, in out/<build>/<case number>/, jobs at a time."""
    def one(n: int, build: str) -> Result:
        cwd = os.path.join(out, build, f"{n:04d}")
        os.makedirs(cwd)
        for name in cases[n].existing:
            path = os.path.join(cwd, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write("old\n")
        return sgl(trees[build], cases[n].argv, cwd)

    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(one, n, build): (n, build) for n in range(len(cases)) for build in trees}
        for done, fut in enumerate(concurrent.futures.as_completed(futures), 1):
            results[futures[fut]] = fut.result()
            if done % 100 == 0:
                print(f"  {done}/{len(futures)} runs", file=sys.stderr, flush=True)
    return results


def compare_result(what: str, a: Result, b: Result, places_a, places_b, differences: List[str],
                   files: bool = True, tie_order: Optional[List[str]] = None) -> None:
    """Appends what differs between the two builds' runs: exit status,
    stdout, stderr, then (files) each file written. tie_order: where a run
    whose outputs differ only in order goes instead (TIE_ORDER_COMMANDS)."""
    found, reordered = [], []
    if a.rc != b.rc:
        found.append(f"  exit status: base {a.rc}, work {b.rc}")
    streams = [("stdout", a.stdout, b.stdout), ("stderr", a.stderr, b.stderr)]
    if files:
        for name in sorted(set(a.files) | set(b.files)):
            if name not in a.files or name not in b.files:
                found.append(f"  file {name}: only written by {'base' if name in a.files else 'work'}")
            else:
                streams.append((f"file {name}", a.files[name], b.files[name]))
    for stream, x, y in streams:
        x, y = normalize(x, places_a), normalize(y, places_b)
        if what.startswith("recording demo"):
            x, y = DEMO_SECONDS.sub(b" in <SECONDS>s", x), DEMO_SECONDS.sub(b" in <SECONDS>s", y)
        if x != y:
            if tie_order is not None and canonical(x) == canonical(y):
                reordered.append(stream)
            else:
                found.append(f"  {stream}:\n{short_diff(x, y)}")
    if found:
        differences.append(what + "\n" + "\n".join(found))
    elif reordered and tie_order is not None:
        tie_order.append(f"{what} ({', '.join(reordered)})")


def compare_commands(trees: Dict[str, str], cases: List[Case], results: Dict[Tuple[int, str], Result],
                     out: str, records: str, inputs: str, differences: List[str],
                     reordered: Optional[List[str]]) -> None:
    """Compares each case's two runs (TIE_ORDER_COMMANDS' up to order when
    reordered is a list)."""
    for n, case in enumerate(cases):
        places = {b: [(os.path.join(out, b, f"{n:04d}"), "<OUT>"), (trees[b], "<TREE>"), (sys.prefix, "<VENV>")]
                  for b in trees}
        line = " ".join(shlex.quote(a.replace(records, "<RECORDS>").replace(inputs, "<INPUTS>")) for a in case.argv)
        tie_order = reordered if reordered is not None and case.argv[:1] and \
            case.argv[0] in TIE_ORDER_COMMANDS else None
        compare_result(f"[{n:04d}] sgl-shapeprof {line}", results[(n, "base")], results[(n, "work")],
                       places["base"], places["work"], differences, tie_order=tie_order)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="HEAD", help="the baseline git ref (default HEAD)")
    ap.add_argument("--keep", metavar="DIR", help="leave the records and every run's folder in DIR (new or empty)")
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time (default 2)")
    ap.add_argument("--unordered-diff", action="store_true",
                    help="compare diff's output up to the order of equal rows (a baseline before "
                         "diff ordered its ties)")
    # the build compared with the baseline: the checkout; another tree (a
    # copy with one output changed on purpose) shows that a change is caught
    ap.add_argument("--tree", default=ROOT, help=argparse.SUPPRESS)
    args = ap.parse_args()
    t0 = time.monotonic()
    tree = os.path.abspath(args.tree)
    if not any(n.startswith("_C") and n.endswith(".so") for n in os.listdir(os.path.join(tree, "sgl_shapeprof"))):
        raise SystemExit(f"same_output.py: {tree} is not built (make install)")
    stale = stale_build(tree)
    if stale:
        print(f"same_output.py: warning: {stale}", file=sys.stderr, flush=True)
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        if os.listdir(args.keep):
            raise SystemExit(f"same_output.py: --keep {args.keep} is not empty")
        tmp = os.path.abspath(args.keep)
    else:
        tmp = tempfile.mkdtemp(prefix="shapeprof-same-")
    base = None
    differences: List[str] = []
    reordered: List[str] = []
    try:
        base = build_baseline(args.base, tmp)
        trees = {"base": base, "work": tree}
        work = os.path.join(tmp, "workload.py")
        with open(work, "w") as f:
            f.write(WORKLOAD)
        print("step 1: the builds' imports, then recording with each", file=sys.stderr, flush=True)
        folders = {b: os.path.join(tmp, "records", b) for b in trees}
        runs = {}
        for b in trees:
            os.makedirs(folders[b])
            check_imports(trees[b], folders[b])
            runs[b] = record_all(trees[b], folders[b], work)
        n_files = compare_recordings(trees, folders, runs, differences)

        inputs = os.path.join(tmp, "inputs")
        make_inputs(base, folders["base"], inputs)
        cases = command_matrix(folders["base"], inputs)
        print(f"step 2: {len(cases)} command runs with each build", file=sys.stderr, flush=True)
        out = os.path.join(tmp, "runs")
        results = run_matrix(trees, cases, out, args.jobs)
        compare_commands(trees, cases, results, out, folders["base"], inputs, differences,
                         reordered if args.unordered_diff else None)
    finally:
        if base is not None:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", base], capture_output=True)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    took = time.monotonic() - t0
    counted = f"{len(cases)} command runs, {n_files} records files"
    if reordered:
        print(f"same up to the order of equal rows (TIE_ORDER_COMMANDS), {len(reordered)} run(s):\n  "
              + "\n  ".join(reordered))
        counted += f" ({len(reordered)} diff runs the same up to the order of equal rows)"
    if differences:
        print("\n\n".join(differences))
        print(f"same_output: {counted}: {len(differences)} difference(s) between {args.base} and {tree} "
              f"({took:.0f}s)")
        sys.exit(1)
    print(f"same_output: {counted}: all byte-identical ({args.base} vs {tree}, {took:.0f}s)"
          + (f"\nwarning: {stale}" if stale else ""))


if __name__ == "__main__":
    main()
