"""The rules the package layout makes visible (issue 19), checked on the
sources' syntax trees, imports inside functions included:

- recording/ imports none of analysis/, cli/, integrations/ (the servers'
  integrations sit above it; on_import.py, which both use, sits below);
- render/ (text, JSON, CSV: the one rendering layer) imports neither cli/
  nor recording/, and analysis/ imports neither render/ nor cli/ (analysis
  returns data, render/ turns it into output, cli/ maps options to both);
- only render/ writes CSV (csv.writer, csv.DictWriter); reading it is free;
- cli/ and analysis/ write no JSON (json.dump, json.dumps: render/jsonout.py
  does), but cli/run/'s run.json (the engine child's arguments) and outputs.json;
- only render/ writes HTML (a string with an HTML tag);
- nothing outside cli/ imports cli/ (but __main__.py, which runs it);
- argparse only in cli/;
- no import cycle between modules;
- integrations/ uses only public names of the rest of the package;
- no module imports another's private names (`from .x import _y`, `x._y`);
- no module outside cli/ exits the process or prints the CLI's
  `sgl-shapeprof CMD: ...` messages;
- one owner per fact: a string literal that spells an OWNED fact (a
  summary's name, our wrappers' marker, SGLang's SHAPES, the profile
  routes, torch's namespaces, the phase extend, the switch's neutral name)
  outside its owner, or an operation's door prefix ("triton:") outside the
  integration whose seam claims it, is a second spelling;
- cli/ has one module per command; cli/main.py only assembles and dispatches;
- and in tests/: no file imports a test module (shared fixtures live in a
  conftest.py, shared helpers in plain modules).

Each rule is also run on a copy of the tree with one offence added, to show
that the checker sees it.
"""
from __future__ import annotations

import ast
import os
import re
import shutil
from dataclasses import dataclass
from typing import Dict, List, Optional, Set, Tuple

import placement
import pytest

PKG = "sgl_shapeprof"
ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), PKG)
NATIVE = {f"{PKG}._C", f"{PKG}._build"}  # the C-API module and the build's record: not Python sources
# Programs, not library code: `python -m sgl_shapeprof` and the runner that
# `sgl-shapeprof record` execs (it keeps the script's process light: no cli/)
ENTRY_POINTS = {f"{PKG}.__main__", f"{PKG}.recording.program"}


@dataclass
class Import:
    module: str               # the module imported (a package's __init__ is the package)
    names: Tuple[str, ...]    # the names taken from it (from M import a, b), else ()
    line: int


@dataclass
class Module:
    name: str
    path: str
    tree: ast.Module
    imports: List[Import]


def _module_name(root: str, path: str) -> Tuple[str, bool]:
    rel = os.path.relpath(path, os.path.dirname(root))[:-3].split(os.sep)
    if rel[-1] == "__init__":
        return ".".join(rel[:-1]), True
    return ".".join(rel), False


def _type_checking_nodes(tree: ast.AST) -> Set[int]:
    """ids of the nodes under `if TYPE_CHECKING:` (never run)."""
    skip: Set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for sub in node.body:
                skip.update(id(n) for n in ast.walk(sub))
    return skip


def load_package(root: str = ROOT) -> Dict[str, Module]:
    files = []
    for d, _, names in os.walk(root):
        files += [os.path.join(d, n) for n in names if n.endswith(".py")]
    known = {_module_name(root, f)[0] for f in files} | NATIVE
    mods: Dict[str, Module] = {}
    for path in sorted(files):
        name, is_pkg = _module_name(root, path)
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        skip = _type_checking_nodes(tree)
        here = name if is_pkg else name.rpartition(".")[0]
        imports: List[Import] = []
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                imports += [Import(a.name, (), node.lineno) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")
                    base = base[:len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                plain = tuple(a.name for a in node.names if f"{target}.{a.name}" not in known)
                imports += [Import(f"{target}.{a.name}", (), node.lineno)
                            for a in node.names if f"{target}.{a.name}" in known]
                if plain or not node.names:
                    imports.append(Import(target, plain, node.lineno))
        mods[name] = Module(name, path, tree, imports)
    return mods


def _inside(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _ours(name: str) -> bool:
    return _inside(name, PKG)


def _where(m: Module, line: int) -> str:
    return f"{os.path.relpath(m.path, os.path.dirname(ROOT))}:{line}"


# -- the rules: each returns its offences, one line each ----------------------

def forbidden_imports(mods: Dict[str, Module], importer: str, imported: List[str],
                      exempt: Set[str] = frozenset()) -> List[str]:
    """Modules inside `importer` (or, with importer "", outside every
    `imported`) that import a module inside one of `imported`."""
    out = []
    for m in mods.values():
        if m.name in exempt:
            continue
        if importer:
            if not _inside(m.name, importer):
                continue
        elif any(_inside(m.name, p) for p in imported):
            continue
        for imp in m.imports:
            if any(_inside(imp.module, p) for p in imported):
                out.append(f"{_where(m, imp.line)}: {m.name} imports {imp.module}")
    return out


def argparse_outside_cli(mods: Dict[str, Module]) -> List[str]:
    return [f"{_where(m, imp.line)}: {m.name} imports argparse"
            for m in mods.values() if not _inside(m.name, f"{PKG}.cli")
            for imp in m.imports if imp.module == "argparse"]


def import_cycle(mods: Dict[str, Module]) -> Optional[List[str]]:
    """One cycle of imports between the package's modules, or None."""
    graph = {n: sorted({i.module for i in m.imports if i.module in mods and i.module != n})
             for n, m in mods.items()}
    state: Dict[str, int] = {}  # 1: on the path, 2: done
    path: List[str] = []

    def visit(n: str) -> Optional[List[str]]:
        state[n] = 1
        path.append(n)
        for t in graph[n]:
            if state.get(t) == 1:
                return path[path.index(t):] + [t]
            if t not in state:
                found = visit(t)
                if found:
                    return found
        path.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def _module_aliases(m: Module) -> Dict[str, str]:
    """Local names bound to modules of the package: `from . import x`,
    `import sgl_shapeprof.x as y`."""
    out: Dict[str, str] = {}
    here = m.name if m.path.endswith("__init__.py") else m.name.rpartition(".")[0]
    for node in ast.walk(m.tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if _ours(a.name) and a.asname:
                    out[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom):
            base = here.split(".")
            target = (".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
                      if node.level else node.module or "")
            for a in node.names:
                out[a.asname or a.name] = f"{target}.{a.name}"
    return out


def private_uses(mods: Dict[str, Module], who: str = PKG, what: str = PKG,
                 allowed: Set[str] = frozenset(NATIVE)) -> List[str]:
    """Modules inside `who` that take a private name (`_x`) from another
    module inside `what`: `from M import _x`, `import M._x`, or `M._x` on
    a name bound to a module. allowed: modules that may be taken whole."""
    out = []
    for m in mods.values():
        if not _inside(m.name, who):
            continue
        for imp in m.imports:
            if not _inside(imp.module, what) or imp.module == m.name:
                continue
            owner = imp.module.rpartition(".")[0]  # a private module is its package's
            if imp.module not in allowed and not _inside(m.name, owner) and any(
                    p.startswith("_") and not p.startswith("__") for p in imp.module.split(".")):
                out.append(f"{_where(m, imp.line)}: {m.name} imports the private module {imp.module}")
            for n in imp.names:
                if n.startswith("_") and not n.startswith("__"):
                    out.append(f"{_where(m, imp.line)}: {m.name} imports {imp.module}.{n}")
        aliases = {k: v for k, v in _module_aliases(m).items() if v in mods and _inside(v, what)}
        for node in ast.walk(m.tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                out.append(f"{_where(m, node.lineno)}: {m.name} uses {aliases[node.value.id]}.{node.attr}")
    return out


def _cli_message(node: ast.AST) -> bool:
    """A string that starts like the CLI's failure line: 'sgl-shapeprof CMD: '."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        text = str(node.values[0].value)
        if text == "sgl-shapeprof " and len(node.values) > 1:
            return True  # f"sgl-shapeprof {cmd}: ..."
    else:
        return False
    head = text.split(":", 1)[0]
    return text.startswith("sgl-shapeprof ") and ":" in text and len(head.split()) == 2


def exits_outside_cli(mods: Dict[str, Module]) -> List[str]:
    out = []
    for m in mods.values():
        if _inside(m.name, f"{PKG}.cli") or m.name in ENTRY_POINTS:
            continue
        for node in ast.walk(m.tree):
            if isinstance(node, ast.Call):
                f = node.func
                name = (f.id if isinstance(f, ast.Name) else
                        f"{f.value.id}.{f.attr}" if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                        else "")
                if name in ("sys.exit", "exit", "quit", "os._exit", "SystemExit"):
                    out.append(f"{_where(m, node.lineno)}: {m.name} calls {name}")
            if isinstance(node, (ast.Constant, ast.JoinedStr)) and _cli_message(node):
                out.append(f"{_where(m, node.lineno)}: {m.name} has the CLI's message "
                           f"{ast.unparse(node)[:60]}")
    return out


def _stdlib_uses(m: Module, module: str, names: Tuple[str, ...]) -> List[Tuple[int, str]]:
    """(line, name) where m takes one of names from the stdlib module
    `module`: imported from it, or as an attribute of any name it is bound to."""
    out: List[Tuple[int, str]] = []
    bound: Set[str] = set()
    for node in ast.walk(m.tree):
        if isinstance(node, ast.Import):
            bound |= {a.asname or a.name for a in node.names if a.name == module}
        elif isinstance(node, ast.ImportFrom) and node.module == module and not node.level:
            out += [(node.lineno, a.name) for a in node.names if a.name in names]
    for node in ast.walk(m.tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in bound and node.attr in names):
            out.append((node.lineno, node.attr))
    return out


CSV_WRITERS = ("writer", "DictWriter")


def csv_writers_outside_render(mods: Dict[str, Module]) -> List[str]:
    """Modules outside render/ that write CSV: csv.writer or csv.DictWriter."""
    return [f"{_where(m, line)}: {m.name} writes CSV (csv.{name}): render/csvout.py's"
            for m in mods.values() if not _inside(m.name, f"{PKG}.render")
            for line, name in _stdlib_uses(m, "csv", CSV_WRITERS)]


JSON_WRITERS = ("dump", "dumps")
JSON_INPUTS = {f"{PKG}.cli.run.local", f"{PKG}.cli.run.remote"}  # run.json (the engine child's arguments), outputs.json: not a command's output


def json_writers_in_cli_or_analysis(mods: Dict[str, Module]) -> List[str]:
    """cli/ and analysis/ modules that write JSON: json.dump or json.dumps."""
    return [f"{_where(m, line)}: {m.name} writes JSON (json.{name}): render/jsonout.py's"
            for m in mods.values() if m.name not in JSON_INPUTS
            and (_inside(m.name, f"{PKG}.cli") or _inside(m.name, f"{PKG}.analysis"))
            for line, name in _stdlib_uses(m, "json", JSON_WRITERS)]


HTML_TAG = re.compile(r"<(!DOCTYPE\b|/?(html|head|body|style|script|div|table|tr|td|th|h[1-6]|p|code)\b[^<>]*>)",
                      re.I)


def html_outside_render(mods: Dict[str, Module]) -> List[str]:
    """Modules outside render/ with HTML markup in a string (an f-string's parts too)."""
    return [f"{_where(m, node.lineno)}: {m.name} writes HTML ({tag.group(0)}): render/html.py's"
            for m in mods.values() if not _inside(m.name, f"{PKG}.render")
            for node in ast.walk(m.tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and (tag := HTML_TAG.search(node.value))]


def commands_outside_their_modules(mods: Dict[str, Module]) -> List[str]:
    """cli/main.py assembles the parser and dispatches, nothing else; every
    other cli/ module but common.py is one command: add_parser() and run()
    (a command with modes is a package, cli/<command>/, its __init__ the
    command, its modules its parts)."""
    out = []
    main = mods[f"{PKG}.cli.main"]
    for node in main.tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name not in ("build_parser", "main"):
            out.append(f"{_where(main, node.lineno)}: cli/main.py defines {node.name}: a command's code")
    for m in mods.values():
        if not _inside(m.name, f"{PKG}.cli") or m.name.rpartition(".")[2] in ("cli", "main", "common"):
            continue
        if m.name.count(".") > f"{PKG}.cli.x".count(".") and f"{m.name.rpartition('.')[0]}" in mods:
            continue  # a part of a command package (cli/run/local.py): its __init__ is the command
        defs = {n.name for n in m.tree.body if isinstance(n, ast.FunctionDef)}
        missing = {"add_parser", "run"} - defs
        if missing:
            out.append(f"{_where(m, 1)}: {m.name} is not a command module (no {', '.join(sorted(missing))})")
    return out


def integration_names(mods: Dict[str, Module]) -> Tuple[str, ...]:
    """integrations/registry.py's INTEGRATIONS, read from its syntax tree."""
    for node in mods[f"{PKG}.integrations.registry"].tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "INTEGRATIONS" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise AssertionError("integrations/registry.py has no INTEGRATIONS")


# Analyses that read a server's own files or names: tune reads SGLang's
# config naming and its operators' names; replay imports the libraries
# that register a recording's custom operators (vllm._C, ...).
SEAM_EXEMPT = (f"{PKG}.analysis.tune", f"{PKG}.replay.scripts")


def integrations_outside_their_folders(mods: Dict[str, Module]) -> List[str]:
    """A server or kernel library (registry.py's INTEGRATIONS) is imported,
    named as a module path or compared with by name only in its own folder
    and the registry."""
    names = integration_names(mods)
    out = []
    for m in mods.values():
        if m.name == f"{PKG}.integrations.registry" or any(_inside(m.name, e) for e in SEAM_EXEMPT):
            continue
        for name in names:
            if _inside(m.name, f"{PKG}.integrations.{name}"):
                continue
            path = re.compile(rf"^{name}(\.[A-Za-z_]\w*)+$")
            for node in ast.walk(m.tree):
                hit = None
                if isinstance(node, ast.Import):
                    hit = next((a.name for a in node.names if a.name.split(".")[0] == name), None)
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module \
                        and node.module.split(".")[0] == name:
                    hit = node.module
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and path.match(node.value):
                    hit = repr(node.value)
                elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops) \
                        and any(isinstance(c, ast.Constant) and c.value == name
                                for c in [node.left, *node.comparators]):
                    hit = f"== {name!r}"
                if hit:
                    out.append(f"{_where(m, node.lineno)}: {m.name} names {name} ({hit}): "
                               f"integrations/{name}/ or the registry's")
    return out


def _docstrings(tree: ast.AST) -> Set[int]:
    """ids of the docstrings' nodes (prose, not a spelling of a fact)."""
    out: Set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            out.add(id(node.body[0].value))
    return out


# A fact -> the modules that may spell it: everyone else imports it from
# them (STYLE.md: a fact has one owner). A string literal equal to one of
# these, outside its owners, is a second spelling.
OWNED = {
    "_summary.json": (f"{PKG}.records.reader",),  # a summary's name (SUMMARY_SUFFIX)
    "__sgl_shapeprof_wrapped__": (f"{PKG}.on_import",),  # our wrappers' marker (WRAPPED)
    "_shapeprof_original": (),  # the old marker: no one
    "SHAPES": (f"{PKG}.integrations.sglang.seam", f"{PKG}.integrations.sglang"),  # (its lazy table's name)
    "/start_profile": (f"{PKG}.integrations.sglang.seam", f"{PKG}.integrations.vllm.seam"),
    "/stop_profile": (f"{PKG}.integrations.sglang.seam", f"{PKG}.integrations.vllm.seam"),
    "symm_mem": (f"{PKG}.records.ledger",),  # torch's namespaces
    "_c10d_functional": (f"{PKG}.records.ledger",),
    "extend": (f"{PKG}.records.phases",),  # phases
    "SHAPEPROF": (f"{PKG}.recording.switch",),  # the switch's neutral spelling
}


def second_spellings(mods: Dict[str, Module]) -> List[str]:
    """String literals (not docstrings) that spell an OWNED fact outside its
    owners, and operation names "<prefix>:..." outside the integration whose
    door writes them (its seam's door_prefixes)."""
    from sgl_shapeprof.integrations import registry
    prefixes = {f"{p}:": f"{PKG}.integrations.{s.name}" for s in registry.seams() for p in s.door_prefixes}
    out = []
    for m in mods.values():
        docs = _docstrings(m.tree)
        for node in ast.walk(m.tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in docs:
                continue
            owners = OWNED.get(node.value)
            if owners is not None and m.name not in owners:
                out.append(f"{_where(m, node.lineno)}: {m.name} spells {node.value!r}: "
                           f"{' or '.join(owners) or 'no one'}'s")
            owner = next((o for p, o in prefixes.items() if node.value.startswith(p)), None)
            if owner and not _inside(m.name, owner):
                out.append(f"{_where(m, node.lineno)}: {m.name} spells {node.value!r}: {owner}'s seam's")
    return out


RULES = {
    "one owner per fact": second_spellings,
    "integrations are named in their own folders only": integrations_outside_their_folders,
    "recording imports none of analysis, cli, integrations":
        lambda mods: forbidden_imports(mods, f"{PKG}.recording",
                                       [f"{PKG}.analysis", f"{PKG}.cli", f"{PKG}.integrations"]),
    "nothing outside cli imports cli":
        lambda mods: forbidden_imports(mods, "", [f"{PKG}.cli"], exempt={f"{PKG}.__main__"}),
    "argparse only in cli": argparse_outside_cli,
    "no import cycle": lambda mods: [" -> ".join(c)] if (c := import_cycle(mods)) else [],
    "integrations use public names only":
        lambda mods: private_uses(mods, f"{PKG}.integrations", PKG),
    "no private names cross modules": private_uses,
    "only cli exits or prints the CLI's messages": exits_outside_cli,
    "one module per command": commands_outside_their_modules,
    "render imports neither cli nor recording":
        lambda mods: forbidden_imports(mods, f"{PKG}.render", [f"{PKG}.cli", f"{PKG}.recording"]),
    "analysis imports neither render nor cli":
        lambda mods: forbidden_imports(mods, f"{PKG}.analysis", [f"{PKG}.render", f"{PKG}.cli"]),
    "only render writes CSV": csv_writers_outside_render,
    "cli and analysis write no JSON": json_writers_in_cli_or_analysis,
    "only render writes HTML": html_outside_render,
}


@pytest.fixture(scope="module")
def package() -> Dict[str, Module]:
    return load_package()


@pytest.mark.parametrize("rule", list(RULES))
def test_rule_holds(package, rule):
    offences = RULES[rule](package)
    assert not offences, f"{rule}:\n" + "\n".join(offences)


def test_the_package_was_read(package):
    assert len(package) > 30
    assert f"{PKG}.recording.profiler" in package and f"{PKG}.cli.main" in package
    # imports inside functions count
    assert any(i.module == f"{PKG}.recording._native"
               for i in package[f"{PKG}.recording.profiler"].imports)


# -- the checker itself: each rule fails on a tree with one offence added -----

BREAKAGES = {
    "one owner per fact": ("cli/run/local.py", "def _summary(path):\n    return path[:-6] + \"_summary.json\"\n"),
    "integrations are named in their own folders only":
        ("cli/report.py", "def _server(args):\n    return args.server == \"sglang\"\n"),
    "recording imports none of analysis, cli, integrations":
        ("recording/switch.py", "def _late():\n    from ..integrations import passes\n"),
    "nothing outside cli imports cli":
        ("records/reader.py", "def _late():\n    from ..cli.common import fail\n"),
    "argparse only in cli": ("analysis/diff.py", "import argparse\n"),
    "no import cycle": ("records/reader.py", "def _late():\n    from . import scan\n"),
    "integrations use public names only":
        ("integrations/sglang/workers.py", "from ...recording import env as _e\n_x = _e._env_profiler\n"),
    "no private names cross modules": ("analysis/gemm.py", "from .cost import _private_thing\n"),
    "only cli exits or prints the CLI's messages":
        ("replay/output.py", "def _f(cmd):\n    print(f\"sgl-shapeprof {cmd}: no\")\n    sys.exit(2)\n"),
    "one module per command": ("cli/main.py", "def _stats(args):\n    return 0\n"),
    "render imports neither cli nor recording":
        ("render/csvout.py", "def _late():\n    from ..recording import switch\n"),
    "analysis imports neither render nor cli":
        ("analysis/tail.py", "def _late():\n    from ..render import jsonout\n"),
    "only render writes CSV":
        ("analysis/gemm.py", "import csv as _csv\n\n\ndef _rows(f):\n    _csv.writer(f).writerow([1])\n"),
    "cli and analysis write no JSON":
        ("cli/cost.py", "def _doc(out):\n    from json import dump\n    dump({}, out)\n"),
    "only render writes HTML":
        ("analysis/report.py", "def _cell(text):\n    return f\"<td class=s>{text}</td>\"\n"),
}


@pytest.mark.parametrize("rule", list(RULES))
def test_rule_fails_on_a_broken_tree(tmp_path, rule):
    copy = tmp_path / PKG
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    rel, code = BREAKAGES[rule]
    with open(copy / rel, "a", encoding="utf-8") as f:
        f.write("\n\n" + code)
    offences = RULES[rule](load_package(str(copy)))
    assert offences, f"{rule}: not seen in {rel}"
    assert any(rel.replace("/", os.sep) in o or "->" in o for o in offences), offences


def test_a_cycle_is_reported_as_a_path(tmp_path):
    copy = tmp_path / PKG
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    with open(copy / "records" / "reader.py", "a", encoding="utf-8") as f:
        f.write("\n\ndef _late():\n    from .scan import scan\n")
    cycle = import_cycle(load_package(str(copy)))
    assert cycle is not None and cycle[0] == cycle[-1]
    assert {f"{PKG}.records.reader", f"{PKG}.records.scan"} <= set(cycle)


# -- the tests' own layout ------------------------------------------------------

TESTS = os.path.dirname(os.path.abspath(__file__))


def imports_in(path: str, members: bool = False):
    """(line, names) of each absolute import in a file: the modules, and
    with members the names taken from them too."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield node.lineno, [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            yield node.lineno, [node.module or ""] + ([a.name for a in node.names] if members else [])


def imports_of_test_modules(root: str = TESTS) -> List[str]:
    """Files under root that import a test module (test_*.py): what tests
    share goes into a conftest.py (fixtures) or a plain module (helpers)."""
    files = [os.path.join(d, n) for d, _, names in os.walk(root) for n in names if n.endswith(".py")]
    tests = {os.path.basename(f)[:-3] for f in files if os.path.basename(f).startswith("test_")}
    out = []
    for path in sorted(files):
        for line, names in imports_in(path):
            out += [f"{os.path.relpath(path, root)}:{line}: imports the test module {n}"
                    for n in names if n.split(".")[0] in tests]
    return out


def test_no_test_module_imports_another():
    offences = imports_of_test_modules()
    assert not offences, "\n".join(offences)


def test_a_test_module_imported_is_caught(tmp_path):
    for name, code in (("test_engine.py", "import pytest\n\n\n@pytest.fixture\ndef model():\n    return 1\n"),
                       ("test_server.py", "def test_x(model):\n    from test_engine import model  # noqa\n"),
                       ("test_other.py", "import test_engine.sub as e\n")):
        (tmp_path / "area").mkdir(exist_ok=True)
        (tmp_path / "area" / name).write_text(code)
    assert imports_of_test_modules(str(tmp_path)) == [
        os.path.join("area", "test_other.py") + ":1: imports the test module test_engine.sub",
        os.path.join("area", "test_server.py") + ":2: imports the test module test_engine"]


# -- where a test runs (tests/placement.py) ----------------------------------

def parity_without_every_torch(root: str = TESTS) -> List[str]:
    """Test modules that use the reference logger's parity oracle but would
    not run on every torch: parity is the first thing a torch release
    changes."""
    out = []
    for d, _, names in os.walk(root):
        for n in sorted(names):
            path = os.path.join(d, n)
            if not (n.startswith("test_") and n.endswith(".py")) or placement.engine(path) \
                    or placement.every_torch(path):
                continue
            for line, names in imports_in(path, members=True):
                used = sorted(set(names) & placement.PARITY_ORACLE)
                if used:
                    out.append(f"{os.path.relpath(path, root)}:{line}: uses {', '.join(used)} "
                               "but runs on one torch only (tests/placement.py)")
    return out


def test_parity_runs_on_every_torch():
    offences = parity_without_every_torch()
    assert not offences, "\n".join(offences)


def test_parity_on_one_torch_is_caught(tmp_path):
    (tmp_path / "test_new_model.py").write_text("from helpers import load, run_both\n")
    (tmp_path / "test_parity_new.py").write_text("from reference_logger import ReferenceLogger\n")
    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "test_engine_x.py").write_text("import reference_logger\n")
    assert parity_without_every_torch(str(tmp_path)) == [
        "test_new_model.py:1: uses run_both but runs on one torch only (tests/placement.py)"]


def test_every_torch_covers_the_torch_dependent_concerns():
    """Each prefix names modules that exist, and the concerns that depend on
    the torch version each have a module that runs on every torch."""
    modules = sorted(n for n in os.listdir(TESTS) if n.startswith("test_") and n.endswith(".py"))
    stale = [p for p in placement.EVERY_TORCH if not any(m.startswith(p) for m in modules)]
    assert not stale, f"prefixes that name no test module: {stale}"
    # each concern's module is chosen by its own prefix (placement.py, the one list)
    for prefix, why in placement.EVERY_TORCH.items():
        assert placement.every_torch(prefix + ".py") == why
    assert placement.every_torch("test_format.py") is None
    # what runs on the second route on every torch runs on every torch
    assert all(placement.every_torch(p + ".py") for p in placement.SECOND_ROUTE)
    assert placement.second_route("test_parity_sweep.py") and not placement.second_route("test_time.py")


def test_the_makefile_selects_by_the_rule():
    """No hand-kept list of test files: the other torches run `-m every_torch`."""
    with open(os.path.join(os.path.dirname(TESTS), "Makefile")) as f:
        text = f.read()
    assert "-m every_torch" in text and "OLD_TESTS" not in text
    assert not re.search(r"tests/test_\w+\.py", text), "a test file named in the Makefile"


def test_every_subpackage_is_installed():
    """pyproject.toml's package discovery finds every folder of the package
    (a folder it misses is missing from every regular install, while an
    editable one hides it), and nothing else."""
    tomllib = pytest.importorskip("tomllib")
    from setuptools import find_packages
    top = os.path.dirname(ROOT)
    with open(os.path.join(top, "pyproject.toml"), "rb") as f:
        find = tomllib.load(f)["tool"]["setuptools"]["packages"]["find"]
    discovered = set(find_packages(where=os.path.join(top, find.get("where", ["."])[0]),
                                   include=find["include"], exclude=find.get("exclude", ())))
    found = {os.path.relpath(d, top).replace(os.sep, ".")
             for d, _, files in os.walk(ROOT) if "__init__.py" in files and "__pycache__" not in d}
    assert discovered == found


# -- the seams (integrations/registry.py): complete, checked when loaded -------

def test_every_seam_is_complete():
    from sgl_shapeprof.integrations import registry
    got = registry.seams()  # each checked (registry.check) as it is loaded
    assert [s.name for s in got] == list(registry.INTEGRATIONS) == list(integration_names(load_package()))
    assert {s.kind for s in got} == set(registry.KINDS)
    for s in got:
        with pytest.raises(AttributeError, match="frozen"):
            s.name = "other"


@pytest.mark.parametrize("fields,why", [
    (dict(kind="plugin"), "SEAM.kind: 'plugin' is not one of"),
    (dict(name="other"), "SEAM.name: 'other' is not its folder's name"),
    (dict(hooks={"mod": "ours.patch"}), "SEAM.hooks: mod: 'ours.patch' is not (our module, its patch function)"),
    (dict(doors={"a b": ("x", "y")}), "SEAM.doors: 'a b' is not a module's name"),
    (dict(door_prefixes=()), "SEAM.door_prefixes: a kernel library's door writes"),
    (dict(door_prefixes=("cute:",)), "SEAM.door_prefixes: 'cute:' is not a name"),
    (dict(engine="x.engine"), "SEAM.engine: a kernel library has no engine"),
    (dict(kind="server", door_prefixes=(), doors={}, engine="x.engine"), "SEAM.engine_api: a server's seam says it"),
    (dict(imported_before="", doors={}), "SEAM.imported_before: '' is not a non-empty string"),
])
def test_a_broken_seam_is_refused(fields, why):
    from sgl_shapeprof.integrations.registry import KERNEL_LIBRARY, Seam, SeamError, check
    good = dict(kind=KERNEL_LIBRARY, name="stand_in", doors={"lib.api": ("ours.door", "patch")},
                door_prefixes=("stand_in",), imported_before="what it misses")
    check(Seam(**good), "stand_in")
    args = {**good, **fields}
    with pytest.raises(SeamError) as e:
        check(Seam(args.pop("kind"), args.pop("name"), **args), "stand_in")
    assert str(e.value).startswith("integrations/stand_in/seam.py: "), e.value
    assert why in str(e.value), e.value


def test_a_seam_that_is_not_one_or_claims_anothers_prefix_is_refused(monkeypatch):
    from sgl_shapeprof.integrations import registry
    with pytest.raises(registry.SeamError, match=r"integrations/x/seam.py: SEAM is dict, not a registry.Seam"):
        registry.check({}, "x")
    taken = registry.seams()[-1].door_prefixes[0]
    stand_in = registry.Seam(registry.KERNEL_LIBRARY, "stand_in", door_prefixes=(taken,))
    monkeypatch.setattr(registry, "INTEGRATIONS", registry.INTEGRATIONS + ("stand_in",))
    monkeypatch.setitem(registry._seams, "stand_in", stand_in)
    with pytest.raises(registry.SeamError, match=r"integrations/stand_in/seam.py: SEAM.door_prefixes: '\w+' is "
                                                 r"integrations/\w+/'s already"):
        registry.seams()


@pytest.mark.parametrize("rel,code,said", [
    ("analysis/cost.py", "def _is_launch(op):\n    return op.startswith(\"triton:\")\n",
     "spells 'triton:': sgl_shapeprof.integrations.triton's seam's"),
    ("integrations/sglang/remote.py", "_MARK = \"__sgl_shapeprof_wrapped__\"\n",
     "spells '__sgl_shapeprof_wrapped__': sgl_shapeprof.on_import's"),
    ("replay/scripts.py", "_MORE = {\"symm_mem\"}\n", "spells 'symm_mem': sgl_shapeprof.records.ledger's"),
    ("integrations/vllm/remote.py", "_ROUTE = \"/start_profile\"\n", "spells '/start_profile'"),
])
def test_each_owned_fact_spelled_again_is_caught(tmp_path, rel, code, said):
    """The owner check on planted second spellings of several facts (a
    docstring that names one is prose, not a spelling)."""
    copy = tmp_path / PKG
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    with open(copy / rel, "a", encoding="utf-8") as f:
        f.write("\n\n" + code + "\n\ndef _prose():\n    \"\"\"symm_mem and triton: as words\"\"\"\n")
    offences = second_spellings(load_package(str(copy)))
    assert len(offences) == 1 and rel in offences[0] and said in offences[0], offences
