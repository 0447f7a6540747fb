"""Building and loading on the torch a user runs: plain `pip install .` fails
fast, the wheel names its torch, and a build for another torch is refused in
one line while the host program runs on, unprofiled."""
import email.parser
import os
import shutil
import subprocess
import sys
import zipfile

import pytest
import torch
from helpers import PKG_ROOT, ROOT

from sgl_shapeprof.recording._native import release

HOST = r'''
import os, torch, sgl_shapeprof
os.environ["SGLANG_PROFILE_SHAPES"] = "1"
prof = sgl_shapeprof.from_env()
print("profiler:", prof is not None)
print("result:", (torch.ones(3) * 2).sum().item())
'''


def run_host(pythonpath, cwd):
    env = dict(os.environ, PYTHONPATH=str(pythonpath))
    return subprocess.run([sys.executable, "-c", HOST], capture_output=True, text=True, env=env,
                          cwd=str(cwd), timeout=120)


def copy_package(dst, torch_version=None):
    """This build of the package, claiming another torch if asked."""
    shutil.copytree(os.path.join(PKG_ROOT, "sgl_shapeprof"), dst / "sgl_shapeprof",
                    ignore=shutil.ignore_patterns("__pycache__"))
    build = dst / "sgl_shapeprof" / "_build.py"
    if torch_version is None:
        build.unlink()
    else:
        build.write_text(f"TORCH_VERSION = {torch_version!r}\n")


def assert_refused_in_one_line(r, *words):
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["profiler: False", "result: 6.0"]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for w in words:
        assert w in lines[0]
    assert "profiling is off" in lines[0] and "--no-build-isolation" in lines[0]


def test_build_for_another_torch_is_refused_in_one_line(tmp_path):
    copy_package(tmp_path, "1.0.0+cpu")
    r = run_host(tmp_path, tmp_path)
    assert_refused_in_one_line(r, "built for torch 1.0.0+cpu", f"running torch {torch.__version__}")
    assert not (tmp_path / "shapes.jsonl").exists()


def test_direct_use_raises_the_same_one_line_error(tmp_path):
    copy_package(tmp_path, "1.0.0")
    code = ("import sgl_shapeprof\n"
            "try:\n    sgl_shapeprof.ShapeProfiler('x.jsonl')\n"
            "except ImportError as e:\n    print(type(e).__name__, '|', e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(tmp_path),
                       env=dict(os.environ, PYTHONPATH=str(tmp_path)), timeout=120)
    assert r.stdout.startswith("NativeModuleError | sgl_shapeprof was built for torch 1.0.0, running"), r.stderr
    assert len(r.stdout.strip().splitlines()) == 1


def test_the_checkouts_build_for_another_torch_is_refused(tmp_path):
    """In the torch matrix, the checkout holds the default venv's build (an
    editable install for torch 2.13): a real build for another torch."""
    built = os.path.join(ROOT, "sgl_shapeprof", "_build.py")
    if PKG_ROOT == ROOT or not os.path.exists(built):
        pytest.skip("the checkout's build is the one under test")
    ns = {}
    exec(open(built).read(), ns)
    if release(ns["TORCH_VERSION"]) == release(torch.__version__):
        pytest.skip("the checkout's build is for this torch")
    r = run_host(ROOT, tmp_path)
    assert_refused_in_one_line(r, f"built for torch {ns['TORCH_VERSION']}", f"running torch {torch.__version__}")


def test_plain_pip_install_fails_fast_with_one_line(tmp_path):
    """Without --no-build-isolation pip would fetch a torch of its own into
    the build environment (gigabytes) and build against it."""
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), ROOT],
                       capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    if "Installing build dependencies: finished with status 'error'" in out:
        # before our setup.py runs: pip found no setuptools for the isolated
        # environment (no package index, as on the GPU machine)
        pytest.skip("pip could not install the isolated build's setuptools: no package index here")
    assert "isolated build environment has none: pip install --no-build-isolation ." in out
    assert "Collecting torch" not in out and "Downloading torch" not in out
    assert not list(tmp_path.glob("*.whl"))


def test_wheel_requires_the_torch_it_was_built_for(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                        "-w", str(tmp_path), ROOT], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (wheel,) = tmp_path.glob("sgl_shapeprof-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(z.read(meta_name).decode())
        build = z.read("sgl_shapeprof/_build.py").decode()
    requires = meta.get_all("Requires-Dist")
    assert f"torch=={release(torch.__version__)}" in requires
    assert meta["Requires-Python"] == ">=3.10"
    assert f"TORCH_VERSION = {torch.__version__!r}" in build
    assert {"sgl_shapeprof_autohook.pth", "sgl_shapeprof_autohook.py"} <= set(names)  # the start-up hook, top-level
    assert any(n.startswith("sgl_shapeprof/_C.") and n.endswith(".so") for n in names)


def test_the_torch_layers_parts_compile_alone_and_once(tmp_path):
    """csrc/torch is three parts (encoder, sync mode, fallback), built as one
    translation unit (sp_torch.cpp, as the core's sp_core.c); each part also
    compiles alone, and together they link with nothing of ours missing:
    what one shares with another is declared in sp_torch_internal.h, not
    borrowed from the order of the includes."""
    import re
    import sysconfig
    from torch.utils import cpp_extension
    cxx = shutil.which(os.environ.get("CXX", "g++"))
    if cxx is None:
        pytest.skip("no C++ compiler")
    torch_dir = os.path.join(ROOT, "csrc", "torch")
    unit = open(os.path.join(torch_dir, "sp_torch.cpp")).read()
    parts = re.findall(r'^#include "(sp_\w+\.cpp)"$', unit, re.M)
    assert sorted(parts) == sorted(f for f in os.listdir(torch_dir)
                                   if f.endswith(".cpp") and f != "sp_torch.cpp")
    # C++20: torch 2.14+ headers need it (BuildExtension adds it to the build)
    flags = ["-std=c++20", "-fPIC", "-O0", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden",
             "-iquote", os.path.join(ROOT, "csrc"), "-isystem", sysconfig.get_paths()["include"]]
    for path in cpp_extension.include_paths():
        flags += ["-isystem", path]
    objects = []
    for part in parts:
        obj = str(tmp_path / (part + ".o"))
        r = subprocess.run([cxx, *flags, "-c", "-o", obj, os.path.join(torch_dir, part)],
                           capture_output=True, text=True)
        assert r.returncode == 0, f"{part} alone:\n{r.stderr[-3000:]}"
        objects.append(obj)
    so = str(tmp_path / "parts.so")
    r = subprocess.run([cxx, "-shared", "-o", so, *objects], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    undefined = subprocess.run(["nm", "-C", "-u", so], capture_output=True, text=True).stdout
    ours = [line for line in undefined.splitlines()
            if line.split()[0] == "U" and "sp_torch::" in line]  # w: a weak TLS init hook
    assert ours == [], ours
    assert "sp_torch::encode_inputs_args" in subprocess.run(
        ["nm", "-C", "--defined-only", so], capture_output=True, text=True).stdout
