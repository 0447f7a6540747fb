"""The documentation keeps up with the code: every command, every option of a
command and every environment variable the code defines is documented, and
every relative link between README.md and docs/*.md resolves (anchors too).

The commands and options come from the installed command line itself
(`python -m sgl_shapeprof [CMD] --help`, in a child process), the variables
from the package's sources as text: nothing here imports the package's
modules, so it holds whatever the modules are called and wherever they live.
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

import pytest
from integration_docs import integrations, undocumented

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
DOCS = os.path.join(ROOT, "docs")
CLI_PAGE = os.path.join(DOCS, "cli.md")
# the variables the code defines: ours, as string literals
OUR_VARS = re.compile(r"""["'](SGLANG_PROFILE_SHAPES\w*|SHAPEPROF_\w+)["']""")
# any variable the package reads by name (os.environ.get("X"), os.environ["X"])
READ_VARS = re.compile(r"""environ(?:\.get\(\s*|\[\s*)["']([A-Z][A-Z0-9_]*)["']""")


def _pages():
    return [README] + sorted(glob.glob(os.path.join(DOCS, "*.md")))


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def _all_docs():
    return "\n".join(_read(p) for p in _pages())


def _help(*args):
    # run from the temporary folder, not the checkout: `python -m` puts the
    # working folder first on sys.path, and the installed package is under test
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", *args, "--help"], capture_output=True,
                       text=True, timeout=120, cwd=tempfile.gettempdir())
    assert r.returncode == 0, r.stderr
    return r.stdout


def commands():
    usage = _help()
    m = re.search(r"\{([a-z][a-z0-9,-]*)\}", usage)
    assert m, usage
    return m.group(1).split(",")


def options(help_text):
    """The options a command's --help lists (long and short), but -h/--help."""
    section = help_text.split("options:", 1)[1] if "options:" in help_text else help_text
    found = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])(?![\w-])", section))
    return sorted(found - {"-h", "--help"})


def synopsis(text):
    """docs/cli.md's first text block, per command: its lines (continuations
    included), with the filters' line for commands that take [filters]."""
    block = re.search(r"```text\n(.*?)```", text, re.S).group(1)
    per, current, filters = {}, None, ""
    for line in block.splitlines():
        m = re.match(r"sgl-shapeprof (\w[\w-]*)", line)
        if m:
            current = m.group(1)
            per[current] = per.get(current, "") + line + "\n"
        elif line.startswith("filters:"):
            filters, current = line, None
        elif line.startswith(" ") and current:
            per[current] += line + "\n"
    return {cmd: s + (filters if "[filters]" in s else "") for cmd, s in per.items()}


def _source_files():
    pkg = os.path.join(ROOT, "sgl_shapeprof")
    files = glob.glob(os.path.join(pkg, "**", "*.py"), recursive=True)
    files += glob.glob(os.path.join(pkg, "**", "*.pth"), recursive=True)
    return files + [os.path.join(ROOT, "setup.py")]


def variables():
    names = set()
    for path in _source_files():
        text = _read(path)
        names.update(OUR_VARS.findall(text))
        names.update(READ_VARS.findall(text))
    # our own test and benchmark switches (SHAPEPROF_*) are documented too
    for path in glob.glob(os.path.join(ROOT, "tests", "**", "*.py"), recursive=True) + \
            glob.glob(os.path.join(ROOT, "benchmarks", "*.py")):
        if os.path.abspath(path) != os.path.abspath(__file__):
            names.update(n for n in OUR_VARS.findall(_read(path)) if n.startswith("SHAPEPROF_"))
    return sorted(names)


def undocumented_variables(names, docs):
    # as code: `NAME` or `NAME=value`
    return [n for n in names if not re.search(r"`" + re.escape(n) + r"(=[^`]*)?`", docs)]


def test_every_command_is_documented():
    cmds = commands()
    assert {"analyze", "diff", "record", "demo"} <= set(cmds), cmds  # the parse found the list
    readme, cli = _read(README), _read(CLI_PAGE)
    syn = synopsis(cli)
    missing_readme = [c for c in cmds if not re.search(r"^\| `" + re.escape(c) + r"\b", readme, re.M)]
    assert not missing_readme, f"commands without a row in README.md's command table: {missing_readme}"
    missing_cli = [c for c in cmds if c not in syn]
    assert not missing_cli, f"commands without a line in docs/cli.md's synopsis: {missing_cli}"
    undescribed = [c for c in cmds if not re.search(r"^- `" + re.escape(c) + r"[` ]", cli, re.M)]
    assert not undescribed, f"commands not described in docs/cli.md's list: {undescribed}"


def test_every_option_of_every_command_is_documented():
    syn = synopsis(_read(CLI_PAGE))
    missing = {}
    for cmd in commands():
        text = syn.get(cmd, "")
        lost = [o for o in options(_help(cmd)) if not re.search(r"(?<![\w-])" + re.escape(o) + r"(?![\w-])", text)]
        if lost:
            missing[cmd] = lost
    assert not missing, f"options missing from docs/cli.md's synopsis: {missing}"


def test_every_environment_variable_is_documented():
    names = variables()
    # the scan found what we know is there
    assert {"SGLANG_PROFILE_SHAPES", "SGLANG_PROFILE_SHAPES_RANK", "SHAPEPROF_WERROR"} <= set(names), names
    missing = undocumented_variables(names, _all_docs())
    assert not missing, f"environment variables the code defines or reads, not in README.md or docs/: {missing}"


def test_every_variable_s_neutral_spelling_is_documented():
    """SHAPEPROF_X works wherever SGLANG_PROFILE_SHAPES_X does (switch.py)."""
    from sgl_shapeprof.recording.switch import neutral_name
    neutral = sorted({neutral_name(n) for n in variables() if n.startswith("SGLANG_PROFILE_SHAPES")})
    assert "SHAPEPROF" in neutral and "SHAPEPROF_FILE" in neutral, neutral
    assert not undocumented_variables(neutral, _all_docs()), undocumented_variables(neutral, _all_docs())


def test_every_integration_is_documented():
    """Its folder in the code map, its records' operation prefixes in
    FORMAT.md, a server in run's synopsis (tests/integration_docs.py)."""
    offences = undocumented(DOCS, integrations())
    assert not offences, "\n".join(offences)


def test_an_undocumented_integration_is_caught():
    found = integrations() + [{"name": "trtllm", "kind": "server", "door_prefixes": []},
                              {"name": "aiter", "kind": "kernel library", "door_prefixes": ["aiter"]}]
    assert undocumented(DOCS, found) == [
        "how-it-works.md: the code map has no integrations/trtllm/",
        "how-it-works.md: the code map has no integrations/aiter/",
        "FORMAT.md: no operation `aiter:...` (aiter's door)",
        "cli.md: run's synopsis does not say --server sglang|vllm|trtllm"]


def test_the_checks_would_fail():
    """The checks above catch what they are for: a name not in the docs."""
    docs = _all_docs()
    assert undocumented_variables(["SGLANG_PROFILE_SHAPES_NOT_A_THING", "SHAPEPROF_NOPE"], docs) == [
        "SGLANG_PROFILE_SHAPES_NOT_A_THING", "SHAPEPROF_NOPE"]
    assert "notacommand" not in synopsis(_read(CLI_PAGE))
    assert options("options:\n  -h, --help  x\n  --new-flag N  y\n  -o FILE, --output FILE  z\n") == [
        "--new-flag", "--output", "-o"]


# -- links -------------------------------------------------------------------

def _strip_code(text):
    """The text without fenced code blocks (their '#' lines are no headings)."""
    return re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.S | re.M)


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation but '-' and '_'
    dropped, spaces made '-'."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    seen, out = {}, set()
    for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", _strip_code(_read(path)), re.M):
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def links(path):
    text = _strip_code(_read(path))
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code is no link
    return re.findall(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text)


def broken_links(path):
    bad = []
    for target in links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
        if not os.path.exists(dest):
            bad.append(f"{target} (no {os.path.relpath(dest, ROOT)})")
        elif anchor and (not dest.endswith(".md") or anchor not in anchors(dest)):
            bad.append(f"{target} (no heading #{anchor} in {os.path.relpath(dest, ROOT)})")
    return bad


@pytest.mark.parametrize("page", [os.path.relpath(p, ROOT) for p in _pages()])
def test_links_resolve(page):
    bad = broken_links(os.path.join(ROOT, page))
    assert not bad, f"{page}: broken links: {bad}"


def test_every_docs_page_is_linked_from_the_readme():
    linked = {os.path.normpath(os.path.join(ROOT, t.partition("#")[0])) for t in links(README)}
    missing = [os.path.relpath(p, ROOT) for p in _pages()[1:] if p not in linked]
    assert not missing, f"docs pages the README does not link: {missing}"


def test_slugs_and_broken_links_are_caught(tmp_path):
    assert slug("CUDA graphs: `--disable-cuda-graph` is not needed") == "cuda-graphs---disable-cuda-graph-is-not-needed"
    assert slug("Recording on request: `/start_profile` with `SHAPES`") == "recording-on-request-start_profile-with-shapes"
    page = tmp_path / "p.md"
    page.write_text("# Top\n\n## Top\n\n```\n# not a heading\n```\n[a](#top-1) [b](#not-a-heading) [c](missing.md)"
                    " [d](p.md#top) `[e](nope.md)`\n", encoding="utf-8")
    assert broken_links(str(page)) == ["#not-a-heading (no heading #not-a-heading in "
                                       f"{os.path.relpath(str(page), ROOT)})",
                                       f"missing.md (no {os.path.relpath(str(tmp_path / 'missing.md'), ROOT)})"]


def test_readme_stays_short():
    """The README says what it is and how to start; the rest is in docs/
    by topic (at most 300 lines)."""
    with open(README) as f:
        n = sum(1 for _ in f)
    assert n <= 300, f"README.md has {n} lines; move detail into docs/"


def test_every_python_path_the_docs_cite_resolves():
    """`sgl_shapeprof.a.b.C` in README.md or docs/ names something that is
    there: its longest importable module, then attributes (run in a child:
    this module imports nothing of the package). The marker operators of
    namespace sgl_shapeprof (torch.ops.sgl_shapeprof.NAME) are operators,
    not Python paths."""
    cited = sorted(set(re.findall(r"\bsgl_shapeprof(?:\.[A-Za-z_]\w*)+", _all_docs())))
    assert "sgl_shapeprof.from_env" in cited      # the scan finds them
    code = r"""
import importlib, json, sys
from sgl_shapeprof.integrations.sglang.block_gemm import MARKERS
bad = []
for path in json.loads(sys.argv[1]):
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
            break
        except ImportError:
            continue
    try:
        for name in parts[cut:]:
            obj = getattr(obj, name)
    except AttributeError:
        if not (len(parts) == 2 and parts[1] in MARKERS.values()):
            bad.append(path)
print(json.dumps(bad))
"""
    import json
    r = subprocess.run([sys.executable, "-c", code, json.dumps(cited)], capture_output=True, text=True,
                       timeout=120, cwd=tempfile.gettempdir())
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [], f"docs cite Python paths that do not resolve: {r.stdout}"


def test_the_tune_example_outside_sglangs_environment_says_what_it_needs_in_one_line(tmp_path):
    """docs/examples/tune_mixtral.py calls SGLang's fused-MoE ops: in a
    Python without SGLang, one line saying so and what to install, no
    traceback, no records file."""
    import importlib.metadata
    if "sglang" in importlib.metadata.packages_distributions():
        pytest.skip("SGLang is installed here")
    out = tmp_path / "mixtral.jsonl"
    r = subprocess.run([sys.executable, os.path.join(DOCS, "examples", "tune_mixtral.py"), str(out)],
                       capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert r.returncode == 1 and r.stdout == "", r.stderr
    assert r.stderr.startswith(f"tune_mixtral.py needs SGLang's fused-MoE ops, which this Python "
                               f"({sys.executable}) cannot import (No module named 'sglang'): ") \
        and r.stderr.count("\n") == 1 and 'pip install "sglang==0.5.23"' in r.stderr, r.stderr
    assert not out.exists()
