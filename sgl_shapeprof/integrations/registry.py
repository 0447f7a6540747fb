"""The integrations, one line each: a server's or a kernel library's folder
under integrations/, whose seam.py builds its Seam (below): all that the
rest of the package needs to know of it (the modules it patches and where,
its doors' operation prefixes, the engine `run` starts). The start-up hook,
the package's doors, `run` and its engine child, srtctl's backend map, the
ledger and the analyses' door prefixes all read this list; no server or
library is named outside its own folder and this list (but by the analyses
that read a server's own files, as `tune` reads SGLang's config naming).
Adding one is a new folder, a line here, docs and tests
(docs/how-it-works.md#adding-a-server-or-a-kernel-library).

A seam's hooks wait for the variable (the start-up hook); a kernel
library's doors are doors (recording/doors.py: inert outside logged
passes), put on by `import sgl_shapeprof` itself (door_finder.py) and by the
start-up hook. Every seam is checked when it is loaded (SeamError names the
seam and the field). Imports nothing but the seams (standard library only,
and not dataclasses, which costs more than the package's whole import):
the package's import reads it.
"""
from __future__ import annotations

import importlib

INTEGRATIONS = ("sglang", "vllm", "flashinfer", "tvm_ffi", "cute_dsl", "inductor", "triton", "deep_ep")

SERVER = "server"
KERNEL_LIBRARY = "kernel library"
# a GEMM op's layout (Seam.gemm_ops): A [M, K] by B [N, K] or [K, N]; B one
# such per group ([G, N, K]), A's M rows split among the groups; A and B
# both per group ([G, M_max, K], [G, N, K]), each group's rows at most M_max;
# A [..., K] and N the result's last dimension (a weight packed, or held in
# a handle, in a layout of its kernel's own: B names the input whose dtype
# is the weight's); A transposed, [K, M], by B [N, K] or [K, N]
GEMM_KINDS = ("gemm", "grouped", "masked", "a_out", "a_t")
KINDS = (SERVER, KERNEL_LIBRARY)

class SeamError(ValueError):
    """A seam that does not say what the rest needs: one line naming the
    seam's file and the field."""


class Seam:
    """What the rest of the package needs to know of one integration. Frozen
    (a dataclass's contract, written by hand: importing dataclasses costs
    more than the package's whole import, which every profiled process
    pays); each integrations/<name>/seam.py builds one, SEAM."""
    __slots__ = ("kind", "name", "hooks", "unarmed_hooks", "plugin_hooks", "plugin_unarmed_hooks", "doors",
                 "imported_before", "wraps_at_import", "door_prefixes", "launches", "engine", "engine_api", "remote",
                 "concurrency_arg", "srtctl_backend", "display_name", "module", "tested_release", "install", "tests",
                 "gemm_ops")
    kind: str                     # SERVER or KERNEL_LIBRARY
    name: str                     # its folder and registry line; `run --server NAME` for a server
    hooks: dict                   # Hooks patched where imported, profiling on (the start-up hook)
    unarmed_hooks: dict           # ... with profiling off (the .pth's finder)
    plugin_hooks: dict            # ... by the server's own plugin entry point, profiling on (vLLM's)
    plugin_unarmed_hooks: dict    # ... and off
    doors: dict                   # a kernel library's Hooks, inert outside logged passes (door_finder.py)
    imported_before: "str | None"  # what its doors miss when the library was imported first
    wraps_at_import: bool         # its doors wrap the library where it is imported (False: Triton's,
                                  # put on only while a logged pass is open)
    door_prefixes: "tuple[str, ...]"  # what its records' operations start with, before ':' (FORMAT.md)
    launches: bool                # its records are kernel launches: parameters by name, grid, options
    engine: "str | None"          # a server: the module `run` starts (engine.py)
    engine_api: "str | None"      # a server: the API `run --engine-arg` gives arguments of ("sglang.Engine")
    remote: "str | None"          # a server: the module that drives one started elsewhere (run --url)
    concurrency_arg: "str | None"  # a server: its engine's argument for requests at once (run --concurrency)
    srtctl_backend: "str | None"  # a server: its name in srtctl's backend.type
    display_name: "str | None"    # a server: its name in messages ("SGLang")
    module: "str | None"          # a server: the module that must be importable to run it
    tested_release: "str | None"  # a server: the release our tests run
    install: "str | None"         # a server: how to install that release
    tests: "str | None"           # a server: the folder of its real-engine tests (tests/<tests>/)
    gemm_ops: dict                # its custom ops that are GEMMs: "namespace.name" -> (A's input,
                                  # B's input, the input the result is written into or None[, its
                                  # GEMM_KINDS entry: "gemm" when left out]); gemm, cost

    def __init__(self, kind: str, name: str, *, hooks: "dict | None" = None, unarmed_hooks: "dict | None" = None,
                 plugin_hooks: "dict | None" = None, plugin_unarmed_hooks: "dict | None" = None,
                 doors: "dict | None" = None, imported_before: "str | None" = None, wraps_at_import: bool = True,
                 door_prefixes: "tuple[str, ...]" = (), launches: bool = False, engine: "str | None" = None,
                 engine_api: "str | None" = None, remote: "str | None" = None, concurrency_arg: "str | None" = None,
                 srtctl_backend: "str | None" = None, display_name: "str | None" = None,
                 module: "str | None" = None, tested_release: "str | None" = None, install: "str | None" = None,
                 tests: "str | None" = None, gemm_ops: "dict | None" = None) -> None:
        values = dict(kind=kind, name=name, hooks=hooks or {}, unarmed_hooks=unarmed_hooks or {},
                      plugin_hooks=plugin_hooks or {}, plugin_unarmed_hooks=plugin_unarmed_hooks or {},
                      doors=doors or {}, imported_before=imported_before,
                      wraps_at_import=wraps_at_import, door_prefixes=tuple(door_prefixes),
                      launches=launches, engine=engine, engine_api=engine_api, remote=remote,
                      concurrency_arg=concurrency_arg,
                      srtctl_backend=srtctl_backend, display_name=display_name, module=module,
                      tested_release=tested_release, install=install, tests=tests, gemm_ops=gemm_ops or {})
        for field, value in values.items():
            object.__setattr__(self, field, value)

    def __setattr__(self, field: str, value) -> None:
        raise AttributeError(f"a Seam is frozen: {field} cannot be set")

    def __repr__(self) -> str:
        return f"Seam({self.kind!r}, {self.name!r})"


# a server's fields, all required; a kernel library has none of them
SERVER_FIELDS = ("engine", "engine_api", "remote", "concurrency_arg", "display_name", "module", "tested_release",
                 "install")
_HOOK_FIELDS = ("hooks", "unarmed_hooks", "plugin_hooks", "plugin_unarmed_hooks", "doors")


def _dotted(value) -> bool:
    return isinstance(value, str) and bool(value) and all(p.isidentifier() for p in value.split("."))


def check(s: object, name: str) -> None:
    """SeamError, naming the seam and the field, unless s is integration
    `name`'s complete Seam."""
    where = f"integrations/{name}/seam.py"
    if not isinstance(s, Seam):
        raise SeamError(f"{where}: SEAM is {type(s).__name__}, not a registry.Seam")

    def bad(field: str, why: str) -> SeamError:
        return SeamError(f"{where}: SEAM.{field}: {why}")

    if s.kind not in KINDS:
        raise bad("kind", f"{s.kind!r} is not one of {', '.join(map(repr, KINDS))}")
    if s.name != name:
        raise bad("name", f"{s.name!r} is not its folder's name ({name!r}, the registry's line)")
    for field in _HOOK_FIELDS:
        hooks = getattr(s, field)
        if not isinstance(hooks, dict):
            raise bad(field, f"a dict of module -> (our module, its patch function), not {type(hooks).__name__}")
        for module, patch in hooks.items():
            if not _dotted(module):
                raise bad(field, f"{module!r} is not a module's name")
            if not (isinstance(patch, tuple) and len(patch) == 2 and _dotted(patch[0]) and _dotted(patch[1])):
                raise bad(field, f"{module}: {patch!r} is not (our module, its patch function)")
    for field in ("imported_before", "srtctl_backend", "tests", *SERVER_FIELDS):
        value = getattr(s, field)
        if value is not None and not (isinstance(value, str) and value.strip()):
            raise bad(field, f"{value!r} is not a non-empty string (or None)")
    for field in ("launches", "wraps_at_import"):
        if not isinstance(getattr(s, field), bool):
            raise bad(field, f"{getattr(s, field)!r} is not True or False")
    if not isinstance(s.gemm_ops, dict):
        raise bad("gemm_ops", f"a dict of op -> (A, B, written into), not {type(s.gemm_ops).__name__}")
    for op, names in s.gemm_ops.items():
        if not (_dotted(op) and op.count(".") == 1):
            raise bad("gemm_ops", f"{op!r} is not an operator's 'namespace.name'")
        if not (isinstance(names, tuple) and len(names) in (3, 4)
                and all(isinstance(n, str) and n for n in names[:2])
                and (names[2] is None or isinstance(names[2], str) and names[2])
                and (len(names) == 3 or names[3] in GEMM_KINDS)):
            raise bad("gemm_ops", f"{op}: {names!r} is not (A's input, B's input, written into or None"
                                  f"[, one of {', '.join(GEMM_KINDS)}])")
    for prefix in s.door_prefixes:
        if not (isinstance(prefix, str) and prefix.isidentifier()):
            raise bad("door_prefixes", f"{prefix!r} is not a name (what an operation starts with, before ':')")
    if s.kind == SERVER:
        missing = [f for f in SERVER_FIELDS if getattr(s, f) is None]
        if missing:
            raise bad(missing[0], "a server's seam says it (run starts its engine, drives it, names it missing)")
        for field in ("engine", "remote"):
            if not _dotted(getattr(s, field)):
                raise bad(field, f"{getattr(s, field)!r} is not a module's name")
        if s.doors:  # its modules are patched when profiling is on (hooks); a hook may write
            raise bad("doors", "a server has hooks, not doors")  # records as a door does (door_prefixes)
    else:
        given = [f for f in (*SERVER_FIELDS, "srtctl_backend", "tests") if getattr(s, f) is not None]
        if given:
            raise bad(given[0], "a kernel library has no engine: a server's field")
        if not s.door_prefixes:
            raise bad("door_prefixes", "a kernel library's door writes operations '<prefix>:...' (FORMAT.md)")
        if s.imported_before is not None and not s.doors:
            raise bad("imported_before", "what a door misses, but there are no doors")


_seams: "dict[str, Seam]" = {}


def seam(name: str) -> Seam:
    """The Seam of integration `name` (its seam.py's SEAM, standard library
    only: cheap), checked."""
    s = _seams.get(name)
    if s is None:
        s = getattr(importlib.import_module(f"{__package__}.{name}.seam"), "SEAM", None)
        check(s, name)
        _seams[name] = s
    return s


def seams() -> "list[Seam]":
    """Every integration's Seam, in the registry's order; two that claim one
    door prefix, srtctl backend or module to patch are refused."""
    out = [seam(n) for n in INTEGRATIONS]
    for field in ("door_prefixes", "srtctl_backend"):
        owner: "dict[str, str]" = {}
        for s in out:
            value = getattr(s, field)
            for v in (value if isinstance(value, tuple) else () if value is None else (value,)):
                if v in owner:
                    raise SeamError(f"integrations/{s.name}/seam.py: SEAM.{field}: {v!r} is "
                                    f"integrations/{owner[v]}/'s already")
                owner[v] = s.name
    return out


def gemm_ops() -> "dict[str, tuple]":
    """Every integration's custom ops that are GEMMs (Seam.gemm_ops)."""
    out: "dict[str, tuple]" = {}
    for s in seams():
        out.update(s.gemm_ops)
    return out


def servers() -> "list[str]":
    """The integrations `sgl-shapeprof run --server` starts (an engine)."""
    return [s.name for s in seams() if s.kind == SERVER]


def hooks(unarmed: bool = False) -> "dict[str, tuple[str, str]]":
    """Every integration's modules the start-up hook patches where they are
    imported, with profiling on (hooks and doors) or off (unarmed_hooks):
    module -> (ours, its function)."""
    out: "dict[str, tuple[str, str]]" = {}
    for s in seams():
        if unarmed:
            out.update(s.unarmed_hooks)
        else:
            out.update(s.hooks)
            out.update(s.doors)
    return out


def doors() -> "dict[str, tuple[str, str]]":
    """The kernel libraries' doors, patched where their modules are imported
    by any process that imports sgl_shapeprof: module -> (ours, its function)."""
    out: "dict[str, tuple[str, str]]" = {}
    for s in seams():
        out.update(s.doors)
    return out


def inert_doors() -> "frozenset[str]":
    """The modules of doors() whose patch wraps nothing where they are
    imported (a door put on only while a logged pass is open)."""
    return frozenset(m for s in seams() if not s.wraps_at_import for m in s.doors)


def door_misses() -> "dict[str, str]":
    """module of doors() -> what its door misses when its library was
    imported before it (the seam's imported_before); absent: nothing."""
    out: "dict[str, str]" = {}
    for s in seams():
        if s.imported_before:
            out.update(dict.fromkeys(s.doors, s.imported_before))
    return out


def door_names() -> "dict[str, str]":
    """An operation's prefix (before ':') -> the integration whose door
    writes it."""
    return {p: s.name for s in seams() for p in s.door_prefixes}


def launch_prefixes() -> "tuple[str, ...]":
    """'<prefix>:' of the doors whose records are kernel launches."""
    return tuple(f"{p}:" for s in seams() if s.launches for p in s.door_prefixes)


def srtctl_backends() -> "dict[str, str]":
    """srtctl's backend.type -> the server `run` starts for it."""
    return {s.srtctl_backend: s.name for s in seams() if s.srtctl_backend}
