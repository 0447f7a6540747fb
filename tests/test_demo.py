"""The demo, as a newcomer meets it (issue 56): the figures the docs show
from the demo's files are what the demo writes now (each command a page
shows on them is run again and compared line by line), what the README
says the demo runs is what it prints, its next steps each run, and `make
demo` says what it is doing while it installs.

Run in child processes, from a scratch folder: the installed command line
is under test, as a person runs it."""
import os
import re
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = [os.path.join(ROOT, "README.md")] + sorted(
    os.path.join(ROOT, "docs", p) for p in os.listdir(os.path.join(ROOT, "docs")) if p.endswith(".md"))
# The demo's folders, as the pages name them: the default run, and one with
# 8 decode steps (the pages' diff of two runs).
DEMOS = {"shapeprof-demo": [], "shapeprof-demo-8": ["--decode-steps", "8"]}
# Commands whose output is a function of the files alone (replay's is a
# measurement, and is not compared).
COMPARED = ("analyze", "gemm", "cost", "diff", "tune")


def cli(*args, cwd, timeout=300):
    return subprocess.run([sys.executable, "-m", "sgl_shapeprof", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """A scratch folder holding the demo's folders; the default run's output."""
    d = tmp_path_factory.mktemp("demo")
    said = {}
    for folder, more in DEMOS.items():
        r = cli("demo", "--dir", folder, *more, cwd=d)
        assert r.returncode == 0, r.stderr
        said[folder] = r.stdout
    return d, said["shapeprof-demo"]


def shown_runs(text):
    """(command line, its output lines) for each `$ sgl-shapeprof ...` in a
    page's ```text blocks."""
    for block in re.findall(r"```text\n(.*?)```", text, flags=re.S):
        command, output = None, []
        for line in block.splitlines() + ["$ (end)"]:
            if line.startswith("$ "):
                if command is not None:
                    while output and not output[-1].strip():
                        output.pop()
                    yield command, output
                command, output = line[2:], []
            elif command is not None:
                output.append(line.rstrip())


def on_demo_files(command):
    """The arguments of a command the demo's files answer, or None."""
    if " | " in command or command.endswith("\\") or not command.startswith("sgl-shapeprof "):
        return None
    args = shlex.split(command, comments=True)[1:]
    files = [a for a in args[1:] if not a.startswith("-") and "/" in a]
    if args[0] not in COMPARED or not files or not all(f.split("/")[0] in DEMOS for f in files):
        return None
    return args


def demo_runs():
    for page in PAGES:
        with open(page, encoding="utf-8") as f:
            for command, output in shown_runs(f.read()):
                args = on_demo_files(command)
                if args is not None:
                    yield pytest.param(args, output, id=f"{os.path.basename(page)}: {command[:70]}")


RUNS = list(demo_runs())


def test_the_pages_show_the_demos_figures():
    """The pages keep showing real output of the demo's files (so the check
    below checks something)."""
    pages = {p.id.split(":")[0] for p in RUNS}
    assert len(RUNS) >= 5 and {"README.md", "cli.md"} <= pages, [p.id for p in RUNS]


@pytest.mark.parametrize("args,shown", RUNS)
def test_a_pages_figures_are_what_the_demo_writes_now(demo, args, shown):
    d, _ = demo
    r = cli(*args, cwd=d)
    assert r.returncode in (0, 1), r.stderr  # 1: a diff that differs
    now = [line.rstrip() for line in r.stdout.splitlines()]
    while now and not now[-1]:
        now.pop()
    assert now[:len(shown)] == shown and (len(now) == len(shown) or shown[-1].startswith("...")), (
        "the page shows output the demo no longer gives; run it again and paste it:\n"
        f"$ sgl-shapeprof {shlex.join(args)}\n" + "\n".join(now))


def test_the_readme_says_what_the_demo_runs(demo):
    _, said = demo
    llm, unet = [line.split(": ", 1)[1] for line in said.splitlines() if re.match(r"[12]/2 ", line)]
    with open(PAGES[0], encoding="utf-8") as f:
        readme = " ".join(f.read().split())
    what = {"LLM": re.sub(r" \(.*", "", llm), "UNet": re.sub(r", deduplicated.*", "", unet)}
    for model, text in what.items():
        assert text in readme, f"the README does not say what the demo's {model} runs: {text!r}"


def test_each_next_step_runs_on_the_demos_files(demo):
    """The commands the demo's last line suggests run as given on its files,
    in the environment `make demo` made (plotly is there: the test extras)."""
    d, said = demo
    (line,) = [line for line in said.splitlines() if line.startswith("Next: ")]
    steps = [s.strip() for s in line[len("Next: sgl-shapeprof "):].split(";")]
    assert [s.split()[0] for s in steps] == ["analyze", "gemm", "cost", "report", "replay"], steps
    for step in steps:
        args = shlex.split(re.sub(r"\[.*?\]", "", step).replace("FILE", "shapeprof-demo/llm_shapes.jsonl"))
        if args[0] == "report":
            args += ["-o", "report.html"]
        if args[0] == "replay":
            args += ["--top", "3"]  # the command as given, bounded: it times every distinct call
        r = cli(*args, cwd=d)
        assert r.returncode == 0, f"{step}: {r.stderr}"


def test_a_next_step_that_needs_an_extra_names_it(monkeypatch):
    """Without plotly, `report FILE` comes with the line that installs it
    (its version from the package's own metadata)."""
    import importlib.util

    from sgl_shapeprof.demo import extra_requirement, next_steps
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "plotly" else real(name, *a))
    assert f"report FILE (needs plotly: pip install '{extra_requirement('report')}')" in next_steps()
    assert extra_requirement("report").startswith("plotly")


def test_make_demo_says_each_step_while_it_installs(tmp_path):
    """`make demo` on a fresh checkout: a line before each long step, and
    pip's own progress (no -q) outside CI; quiet pip in CI."""
    def plan(ci):
        env = {k: v for k, v in os.environ.items() if k not in ("CI", "MAKEFLAGS", "MAKELEVEL")}
        if ci:
            env["CI"] = "true"
        r = subprocess.run(["make", "-n", "demo", f"VENV={tmp_path / 'venv'}"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout.splitlines()
    lines = plan(ci=False)
    installs = [i for i, line in enumerate(lines) if " -m pip install" in line]
    steps = [i for i, line in enumerate(lines) if line.startswith("echo \"== [")]
    assert len(installs) >= 2 and len(steps) == 3, lines
    torch_at = next(i for i in installs if "torch==" in lines[i])
    assert any(s < torch_at for s in steps) and steps[-1] < installs[-1], lines
    assert not any(" -q" in lines[i] for i in installs), lines
    assert all(" -q" in line for line in plan(ci=True) if " -m pip install" in line)
