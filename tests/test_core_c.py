"""The C core's own unit tests (csrc/tests/test_core.c, and test_file.c for the
records file layer alone): built without torch or Python, and run plain,
under AddressSanitizer + UndefinedBehaviorSanitizer, under ThreadSanitizer, and with the core's parts compiled one by one instead of
as the amalgamation (also `make test-core`, which needs no torch). The parts
compile in any order: the amalgamation with its includes reversed builds too."""
import os
import re
import shutil
import subprocess

import pytest
from helpers import ROOT

CSRC = os.path.join(ROOT, "csrc")
CORE = os.path.join(CSRC, "core")
AMALGAMATION = os.path.join(CORE, "sp_core.c")
PARTS = sorted(os.path.join(CORE, f) for f in os.listdir(CORE)
               if f.startswith("sp_") and f.endswith(".c") and f != "sp_core.c")
# SP_DEBUG: the test build asserts the calling protocol
FLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-g", "-DSP_DEBUG"]
VARIANTS = {
    "plain": ["-O2"],
    "asan-ubsan": ["-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                   "-fno-omit-frame-pointer"],
    # the flusher thread runs beside the tests' passes
    "tsan": ["-O1", "-fsanitize=thread"],
    # each part its own translation unit: the amalgamation is a speed choice only
    "parts": ["-O2"],
}


def compiler():
    cc = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    return cc


def build_and_run(tmp_path, variant, test, sources):
    """csrc/tests/<test>.c built with sources and run: every test in it passed."""
    cc = compiler()
    exe = str(tmp_path / test)
    build = subprocess.run(
        [cc, *FLAGS, *VARIANTS[variant], "-o", exe, os.path.join(CSRC, "tests", f"{test}.c"),
         *sources, "-lpthread"], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1", TSAN_OPTIONS="halt_on_error=1")
    run = subprocess.run([exe], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    src = open(os.path.join(CSRC, "tests", f"{test}.c")).read()
    n_tests = len(re.findall(r"^static void test_\w+\(void\) \{", src, re.M))
    assert run.stdout.strip() == f"{n_tests} passed, 0 failed"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_core_unit_tests(tmp_path, variant):
    build_and_run(tmp_path, variant, "test_core", PARTS if variant == "parts" else [AMALGAMATION])


@pytest.mark.parametrize("variant", ["plain", "asan-ubsan", "tsan"])
def test_the_file_layer_alone(tmp_path, variant):
    """sp_file.c with no other part than the lock order's check: the file
    layer knows nothing of the profiler (it would not link otherwise)."""
    build_and_run(tmp_path, variant, "test_file",
                  [os.path.join(CORE, "sp_file.c"), os.path.join(CORE, "sp_lock.c")])


def amalgamated_parts():
    return re.findall(r'^#include "(sp_\w+\.c)"$', open(AMALGAMATION).read(), re.M)


def test_the_amalgamation_includes_every_part_once():
    assert sorted(amalgamated_parts()) == [os.path.basename(p) for p in PARTS]


def test_each_part_compiles_alone():
    cc = compiler()
    for part in PARTS:
        r = subprocess.run([cc, *FLAGS, "-O2", "-c", "-o", os.devnull, part],
                           capture_output=True, text=True)
        assert r.returncode == 0, f"{os.path.basename(part)} alone:\n{r.stderr}"


def test_the_amalgamation_compiles_with_its_parts_reversed(tmp_path):
    """No part relies on the ones before it (a tentative definition, a forward
    declaration standing in for order): each owns its globals and declares
    what it shares in sp_internal.h."""
    cc = compiler()
    text = open(AMALGAMATION).read()
    includes = [f'#include "{p}"' for p in amalgamated_parts()]
    head = text[:text.index(includes[0])]
    src = tmp_path / "sp_core_reversed.c"
    src.write_text(head + "\n".join(reversed(includes)) + "\n")
    r = subprocess.run([cc, *FLAGS, "-O2", "-iquote", CORE, "-c", "-o", os.devnull, str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_each_layer_includes_only_what_it_may():
    """csrc/core knows neither Python nor torch; csrc/torch (the fallback)
    knows c10 and the core, not Python."""
    banned = {
        "core": ("Python.h", "pybind11/", "torch/", "c10/", "ATen/", "python/"),
        "torch": ("Python.h", "pybind11/", "torch/csrc/", "python/"),
    }
    for layer, names in banned.items():
        folder = os.path.join(CSRC, layer)
        for f in sorted(os.listdir(folder)):
            includes = re.findall(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]',
                                  open(os.path.join(folder, f)).read(), re.M)
            bad = [i for i in includes if i.startswith(names) and i != "torch/sp_fallback.h"]
            assert not bad, f"csrc/{layer}/{f} includes {bad}"


def _c_code(path):
    """A part's source without comments and string or character literals."""
    src = open(path).read()
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    src = re.sub(r"//[^\n]*", " ", src)
    src = re.sub(r'"(\\.|[^"\\\n])*"', '""', src)
    return re.sub(r"'(\\.|[^'\\\n])*'", "''", src)


# A function defined at file scope and not static: SP_PRIVATE (shared
# between parts) or the API's (sp_core.h).
_C_DEFINITION = re.compile(r"^(?!static\b)(?!typedef\b)[A-Za-z_][\w \t*]*?\b(\w+)\s*\([^;{}]*\)\s*\{",
                           re.M)


def part_calls(core):
    """{(part, other part): [functions of the other it names]}, from the
    sources of the core's parts in `core`; and the parts in the
    amalgamation's order. A function named counts, called or taken as a
    pointer; a pointer handed down (flusher_init, p->destroy) does not."""
    order = re.findall(r'^#include "(sp_\w+\.c)"$', open(os.path.join(core, "sp_core.c")).read(),
                       re.M)
    code = {part: _c_code(os.path.join(core, part)) for part in order}
    owner = {name: part for part, src in code.items() for name in _C_DEFINITION.findall(src)}
    edges = {}
    for part, src in code.items():
        for name in sorted(set(re.findall(r"\b\w+\b", src))):
            other = owner.get(name)
            if other and other != part:
                edges.setdefault((part, other), []).append(name)
    return edges, order


def call_graph_problems(core):
    """What breaks the rule that the parts are layers: a part that calls a
    part included after it in sp_core.c, or a cycle."""
    edges, order = part_calls(core)
    problems = [f"{a} calls {b} (included after it): {', '.join(names)}"
                for (a, b), names in sorted(edges.items()) if order.index(b) > order.index(a)]
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    state = {}

    def visit(part, path):
        state[part] = 1
        for other in sorted(graph.get(part, ())):
            if state.get(other) == 1:
                cycle = path[path.index(other):] + [other]
                problems.append("cycle: " + " -> ".join(cycle))
            elif other not in state:
                visit(other, path + [other])
        state[part] = 2

    for part in order:
        if part not in state:
            visit(part, [part])
    return problems


def test_the_parts_call_down_only():
    """The core's parts are layers: sp_core.c includes them in dependency
    order, each calls only parts included before it, and no calls go round
    in a circle (a lower part that needs a higher one is handed a function
    pointer: flusher_init, p->destroy)."""
    edges, order = part_calls(CORE)
    assert ("sp_record.c", "sp_sigtable.c") in edges, "the call graph was not read"
    assert call_graph_problems(CORE) == []


def test_a_part_calling_up_is_caught(tmp_path):
    for part in amalgamated_parts() + ["sp_core.c", "sp_internal.h", "sp_core.h"]:
        shutil.copy(os.path.join(CORE, part), tmp_path / part)
    text = (tmp_path / "sp_text.c").read_text()
    (tmp_path / "sp_text.c").write_text(text + "\nstatic void up(void) { (void)pass_of_call; }\n")
    problems = call_graph_problems(str(tmp_path))
    assert any(p.startswith("sp_text.c calls sp_pass.c") for p in problems), problems
    assert any(p.startswith("cycle: sp_text.c") and "sp_pass.c" in p for p in problems), problems


# A section banner of sp_internal.h: "/* ---- sp_text.c [buf_ text_]: ..."
_BANNER = re.compile(r"^/\* ---- (sp_\w+\.c) \[([\w ]+)\]:", re.M)
_HEADER_INLINE = re.compile(r"^static inline [\w \t*]*?\b(\w+)\s*\(", re.M)


def prefix_problems(core):
    """What breaks the naming rule of sp_internal.h: every part has a banner
    giving its prefixes, no two parts share a prefix, and each function a
    part shares (SP_PRIVATE) or declares inline in its section is named
    with one of its part's prefixes."""
    header = open(os.path.join(core, "sp_internal.h")).read()
    banners = list(_BANNER.finditer(header))
    prefixes = {m.group(1): m.group(2).split() for m in banners}
    edges, order = part_calls(core)
    problems = [f"{part} has no section in sp_internal.h" for part in order if part not in prefixes]
    owner_of_prefix = {}
    for part, pre in prefixes.items():
        for x in pre:
            if x in owner_of_prefix:
                problems.append(f"prefix {x} is both {owner_of_prefix[x]}'s and {part}'s")
            owner_of_prefix[x] = part
    shared = {}
    for part in order:
        src = _c_code(os.path.join(core, part))
        for name in _C_DEFINITION.findall(src):
            if not name.startswith("sp_"):  # sp_: the API's (sp_core.h)
                shared.setdefault(part, []).append(name)
    for i, m in enumerate(banners):
        end = banners[i + 1].start() if i + 1 < len(banners) else len(header)
        shared.setdefault(m.group(1), []).extend(_HEADER_INLINE.findall(header[m.end():end]))
    for part, names in sorted(shared.items()):
        for name in names:
            if not name.startswith(tuple(prefixes.get(part, ()))):
                problems.append(f"{part}: {name} is not named with its prefix "
                                f"({' '.join(prefixes.get(part, ())) or 'none'})")
    return problems


def test_shared_functions_are_named_by_their_part():
    """An internal function's name says its part (SQLite's rule): a reader
    of sp_record.c who meets sig_lookup knows to open sp_sigtable.c."""
    assert prefix_problems(CORE) == []


def test_a_misnamed_function_is_caught(tmp_path):
    for part in amalgamated_parts() + ["sp_core.c", "sp_internal.h", "sp_core.h"]:
        shutil.copy(os.path.join(CORE, part), tmp_path / part)
    text = (tmp_path / "sp_tally.c").read_text()
    (tmp_path / "sp_tally.c").write_text(
        text + "\nSP_PRIVATE int count_calls(void) { return 0; }\n")
    header = (tmp_path / "sp_internal.h").read_text()
    (tmp_path / "sp_internal.h").write_text(header.replace("[tally_]", "[tally_ sig_]"))
    problems = prefix_problems(str(tmp_path))
    assert "sp_tally.c: count_calls is not named with its prefix (tally_ sig_)" in problems, problems
    assert "prefix sig_ is both sp_sigtable.c's and sp_tally.c's" in problems, problems
