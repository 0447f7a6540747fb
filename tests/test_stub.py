"""sgl_shapeprof/_C.pyi matches the built module: the same functions, class,
methods and properties, with the same parameters (names, kinds, which have
defaults). The module's docstrings carry text signatures, which inspect reads;
the stub is read with ast."""
import ast
import inspect
import os

from helpers import ROOT

from sgl_shapeprof import _C

STUB = os.path.join(ROOT, "sgl_shapeprof", "_C.pyi")
P = inspect.Parameter


def stub_params(fn: ast.FunctionDef) -> list:
    """(name, kind, has default) per parameter, as inspect would say them."""
    a = fn.args
    positional = [(x, P.POSITIONAL_ONLY) for x in a.posonlyargs] + \
                 [(x, P.POSITIONAL_OR_KEYWORD) for x in a.args]
    first_default = len(positional) - len(a.defaults)
    out = [(x.arg, kind, i >= first_default) for i, (x, kind) in enumerate(positional)]
    if a.vararg:
        out.append((a.vararg.arg, P.VAR_POSITIONAL, False))
    out += [(x.arg, P.KEYWORD_ONLY, d is not None) for x, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg:
        out.append((a.kwarg.arg, P.VAR_KEYWORD, False))
    return out


def real_params(obj) -> list:
    return [(p.name, p.kind, p.default is not P.empty)
            for p in inspect.signature(obj).parameters.values()]


def stub():
    tree = ast.parse(open(STUB).read())
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    return funcs, classes


def is_property(fn: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list)


def test_the_stub_names_what_the_module_defines():
    funcs, classes = stub()
    constants = {n.target.id: n.annotation.id for n in ast.parse(open(STUB).read()).body
                 if isinstance(n, ast.AnnAssign)}
    public = {n for n in dir(_C) if not n.startswith("_")}
    assert set(funcs) | set(classes) | set(constants) == public
    for name, kind in constants.items():
        assert type(getattr(_C, name)).__name__ == kind, name
    for name in funcs:
        assert inspect.isbuiltin(getattr(_C, name)), name
    for name in classes:
        assert inspect.isclass(getattr(_C, name)), name


def test_module_functions_take_what_the_stub_says():
    funcs, _ = stub()
    for name, fn in funcs.items():
        assert stub_params(fn) == real_params(getattr(_C, name)), name


def test_classes_match_the_stub():
    _, classes = stub()
    for cname, cls in classes.items():
        real = getattr(_C, cname)
        defs = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
        props = {n for n, fn in defs.items() if is_property(fn)}
        methods = {n for n in defs if n not in props and not n.startswith("__")}
        members = {n: v for n, v in vars(real).items() if not n.startswith("__")}
        assert props == {n for n, v in members.items() if inspect.isgetsetdescriptor(v)}, cname
        assert methods == {n for n, v in members.items() if inspect.ismethoddescriptor(v)
                           and not inspect.isgetsetdescriptor(v)}, cname
        for name in methods:
            assert stub_params(defs[name]) == real_params(getattr(real, name)), f"{cname}.{name}"
        # the constructor: the stub's __init__ less self, the class's signature
        init = stub_params(defs["__init__"])
        assert init[0][0] == "self"
        assert init[1:] == real_params(real), f"{cname}.__init__"
