"""The SGLang integration against SGLang's own sources (the 0.5.23 wheel from
PyPI): the patches apply, the patched files compile, and the patched workers,
with their heavy imports stubbed, profile one pass per forward call. Also the
zero-edit start-up hook, and the worker-hook helpers."""
import enum
import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
import types
import zipfile

import pytest
import torch
from helpers import HOOK_FILES, PKG_ROOT, ROOT, copy_hook, hook_module, load, run_python
from sglang_stubs import stubbed_sglang

from sgl_shapeprof.integrations import sglang as integ

SGLANG_VERSION = "0.5.23"
FILES = {
    "tp_worker": "sglang/srt/managers/tp_worker.py",
    "gpu_worker": "sglang/multimodal_gen/runtime/managers/gpu_worker.py",
    "profiler_manager": "sglang/srt/managers/scheduler_components/profiler_manager.py",
    "tokenizer_control_mixin": "sglang/srt/managers/tokenizer_control_mixin.py",
    "http_server": "sglang/srt/entrypoints/http_server.py",
}
CACHE = os.environ.get("SHAPEPROF_TEST_CACHE",
                       os.path.join(os.path.expanduser("~"), ".cache", "sgl_shapeprof-tests"))


@pytest.fixture(scope="session")
def sglang_wheel():
    os.makedirs(CACHE, exist_ok=True)
    found = [f for f in os.listdir(CACHE) if f.startswith(f"sglang-{SGLANG_VERSION}-") and f.endswith(".whl")]
    if not found:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", CACHE,
                            f"sglang=={SGLANG_VERSION}"], capture_output=True, text=True, timeout=600)
        found = [f for f in os.listdir(CACHE) if f.startswith(f"sglang-{SGLANG_VERSION}-")]
        if r.returncode != 0 or not found:
            pytest.skip(f"cannot download sglang=={SGLANG_VERSION} from PyPI: {r.stderr.strip()[-300:]}")
    return os.path.join(CACHE, found[0])


@pytest.fixture
def patched_tree(tmp_path, sglang_wheel):
    """The two real files, extracted and patched in tmp_path/sglang/..."""
    with zipfile.ZipFile(sglang_wheel) as z:
        for rel in FILES.values():
            z.extract(rel, tmp_path)
    for name in FILES:
        patch = os.path.join(ROOT, "patches", f"sglang-{SGLANG_VERSION}-{name}.patch")
        for extra in (["--dry-run"], []):
            r = subprocess.run(["patch", "-p1", "--forward", *extra, "-d", str(tmp_path), "-i", patch],
                               capture_output=True, text=True)
            assert r.returncode == 0, r.stdout + r.stderr
    return tmp_path


def test_patches_are_small_and_compile(patched_tree):
    for name, rel in FILES.items():
        text = open(os.path.join(ROOT, "patches", f"sglang-{SGLANG_VERSION}-{name}.patch")).read()
        added = [ln for ln in text.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
        assert 3 <= len(added) <= 6, added
        r = subprocess.run([sys.executable, "-m", "py_compile", str(patched_tree / rel)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


class ForwardMode(enum.IntEnum):
    EXTEND = 1
    DECODE = 2
    IDLE = 3


def _llm_worker_class(path, tp_rank):
    parallel = types.SimpleNamespace(tp_rank=tp_rank, pp_group=None, world_group=None, tp_size=2, pp_rank=0)
    overrides = {"sglang.srt.runtime_context.get_parallel": lambda: parallel}
    return stubbed_sglang({"sglang.srt.managers.tp_worker": str(path)}, overrides)


def _fake_forward(self, batch=None, forward_batch=None, **kwargs):
    """Stands in for the model: a few real ops whose shapes depend on the batch."""
    n = 16 if batch.forward_mode == ForwardMode.EXTEND else 1
    x = torch.randn(n, 32)
    return torch.relu(x @ torch.randn(32, 8))


@pytest.mark.parametrize("profiled_rank,worker_rank", [("1", 1), ("0", 1)])
def test_patched_llm_worker_marks_passes(patched_tree, tmp_path, monkeypatch, profiled_rank, worker_rank):
    out = tmp_path / "llm.jsonl"
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES", "1")
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_RANK", profiled_rank)
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_FILE", str(out))
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_SKIP_WARMUP", "1")
    with _llm_worker_class(patched_tree / FILES["tp_worker"], worker_rank):
        import sglang.srt.managers.tp_worker as tp
        monkeypatch.setattr(tp.TpModelWorker, "forward_batch_generation", _fake_forward)
        worker = tp.TpModelWorker(server_args=None, gpu_id=0, nccl_port=0, random_seed=0)
        prof = vars(worker).get("_sgl_shapeprof")
        for mode in [ForwardMode.EXTEND, ForwardMode.EXTEND, ForwardMode.DECODE, ForwardMode.DECODE]:
            worker.forward_batch_generation(types.SimpleNamespace(forward_mode=mode))
    if profiled_rank != str(worker_rank):
        assert prof is None and not out.exists()
        return
    prof.close()
    recs = load(out)
    assert [(r["forward_pass"], r["phase"]) for r in recs if r["operation"] == "aten.mm.default"] == [
        (2, "extend"), (3, "decode"), (4, "decode")]
    s = json.load(open(prof.summary_path))
    assert s["rank"] == 1 and s["forward_passes"] == 4 and s["dedupe_enabled"] is False
    assert s["phase_passes"] == {"extend": 1, "decode": 2}


def test_unpatched_behaviour_when_env_unset(patched_tree, tmp_path, monkeypatch):
    monkeypatch.delenv("SGLANG_PROFILE_SHAPES", raising=False)
    with _llm_worker_class(patched_tree / FILES["tp_worker"], 0):
        import sglang.srt.managers.tp_worker as tp
        worker = tp.TpModelWorker(server_args=None, gpu_id=0, nccl_port=0, random_seed=0)
        assert "forward_batch_generation" not in vars(worker)  # not wrapped
        assert "_sgl_shapeprof" not in vars(worker)
    assert "sgl_shapeprof.integrations.sglang" in sys.modules  # (this test imported it)


def test_patched_diffusion_worker_dedupes_by_default(patched_tree, tmp_path, monkeypatch):
    out = tmp_path / "dif.jsonl"
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES", "1")
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_FILE", str(out))
    path = patched_tree / FILES["gpu_worker"]

    def steps(self, batch, return_req=False, defer_finalize=False):
        x = torch.randn(1, 4, 8, 8)
        for _ in range(50):
            x = torch.tanh(x * 0.9)
        return x

    with stubbed_sglang({"sglang.multimodal_gen.runtime.managers.gpu_worker": str(path)}):
        import sglang.multimodal_gen.runtime.managers.gpu_worker as gw
        monkeypatch.setattr(gw.GPUWorker, "init_device_and_model", lambda self: None)
        monkeypatch.setattr(gw.GPUWorker, "execute_forward", steps)
        server_args = types.SimpleNamespace(num_gpus=1, dp_size=1, async_output_save=False)
        worker = gw.GPUWorker(local_rank=0, rank=0, master_port=0, server_args=server_args)
        worker.execute_forward([types.SimpleNamespace(is_warmup=True)])
        worker.execute_forward([types.SimpleNamespace(is_warmup=False)])
        prof = vars(worker)["_sgl_shapeprof"]
    prof.close()
    s = json.load(open(prof.summary_path))
    assert s["dedupe_enabled"] is True and s["forward_passes"] == 2
    assert s["operation_counts"]["aten.tanh.default"] == 100
    assert s["phase_passes"] == {"warmup": 1, "generate": 1}
    # each signature once per phase (a phase is part of it): steps 2..50 only count
    assert [(r["phase"], r["operation"]) for r in load(out)] == [
        (ph, op) for ph in ("warmup", "generate")
        for op in ("aten.randn.default", "aten.mul.Tensor", "aten.tanh.default")]


ZERO_EDIT = r'''
import site, sys, types
site.addsitedir(sys.argv[1])            # what site-packages does at start-up
# a stand-in for SGLang's module, imported after start-up like the real one
import importlib.util, os
pkg = os.path.join(sys.argv[2], "sglang", "srt", "managers")
os.makedirs(pkg, exist_ok=True)
for d in ("sglang", "sglang/srt", "sglang/srt/managers"):
    open(os.path.join(sys.argv[2], d, "__init__.py"), "a").close()
open(os.path.join(pkg, "tp_worker.py"), "w").write("""
import torch
class TpModelWorker:
    def __init__(self, tp_rank):
        self.tp_rank = tp_rank
    def forward_batch_generation(self, batch=None, forward_batch=None):
        return torch.ones(3, 5).neg()
""")
sys.path.insert(0, sys.argv[2])
from sglang.srt.managers.tp_worker import TpModelWorker
w = TpModelWorker(0)
w.forward_batch_generation(types.SimpleNamespace(forward_mode=types.SimpleNamespace(name="DECODE")))
print("hooked" if hasattr(w, "_sgl_shapeprof") else "not hooked", "sgl_shapeprof" in sys.modules)
'''


@pytest.mark.parametrize("enabled", [True, False])
def test_zero_edit_startup_hook(tmp_path, enabled):
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    copy_hook(site_dir)
    env = {"SGLANG_PROFILE_SHAPES_FILE": str(tmp_path / "z.jsonl")}
    if enabled:
        env["SGLANG_PROFILE_SHAPES"] = "1"
    r = run_python(ZERO_EDIT, env_extra=env, args=(site_dir, tmp_path / "src"))
    assert r.returncode == 0, r.stderr
    if enabled:
        assert r.stdout.split() == ["hooked", "True"]
        recs = load(tmp_path / "z.jsonl")
        assert [(x["operation"], x["phase"]) for x in recs] == [
            ("aten.ones.default", "decode"), ("aten.neg.default", "decode")]
    else:
        assert r.stdout.split() == ["not", "hooked", "False"]
        assert not (tmp_path / "z.jsonl").exists()


@pytest.mark.parametrize("value,says", [
    ("true", "SGLANG_PROFILE_SHAPES='true' must be 0, 1 or on_request; profiling is off"),
    (" 1", None),
])
def test_zero_edit_hook_takes_what_the_config_takes(tmp_path, value, says):
    """The .pth line decides whether our code loads at all: a value the
    config reads as on (" 1") must load it, and a bad one ("true") must load
    it too, so that the worker says which variable is wrong instead of
    running silently unprofiled."""
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    copy_hook(site_dir)
    env = {"SGLANG_PROFILE_SHAPES_FILE": str(tmp_path / "z.jsonl"), "SGLANG_PROFILE_SHAPES": value}
    r = run_python(ZERO_EDIT, env_extra=env, args=(site_dir, tmp_path / "src"))
    assert r.returncode == 0, r.stderr
    if says:
        assert r.stdout.split() == ["not", "hooked", "True"], r.stdout
        assert r.stderr.splitlines() == [f"sgl_shapeprof: {says}"], r.stderr
        assert not (tmp_path / "z.jsonl").exists()
    else:
        assert r.stdout.split() == ["hooked", "True"], r.stderr
        assert [x["operation"] for x in load(tmp_path / "z.jsonl")] == ["aten.ones.default", "aten.neg.default"]


UNARMED = r'''
import asyncio, enum, json, os, site, sys
site.addsitedir(sys.argv[1])            # what site-packages does at start-up (run with -S:
sys.path[len(sys.path):] = sys.argv[3:]  # the environment's own .pth files are not run)
import email.mime.text, http.client     # other imports: nothing of ours loads
loaded = ["sgl_shapeprof" in sys.modules]
# stand-ins for SGLang's tokenizer mixin and the request types it imports
root = sys.argv[2]
for d in ("sglang", "sglang/srt", "sglang/srt/managers"):
    os.makedirs(os.path.join(root, d), exist_ok=True)
    open(os.path.join(root, d, "__init__.py"), "a").close()
open(os.path.join(root, "sglang/srt/managers/io_struct.py"), "w").write("""
import enum
class ProfileReqType(enum.Enum):
    START_PROFILE = 1
    STOP_PROFILE = 2
""")
open(os.path.join(root, "sglang/srt/managers/tokenizer_control_mixin.py"), "w").write("""
class TokenizerControlMixin:
    async def _execute_profile(self, req):
        return "sglang: " + ",".join(req.activities or [])
""")
sys.path.insert(0, root)
from sglang.srt.managers.io_struct import ProfileReqType
from sglang.srt.managers.tokenizer_control_mixin import TokenizerControlMixin
loaded.append("sgl_shapeprof" in sys.modules)
class Req:
    def __init__(self, req_type, activities):
        self.req_type, self.activities = req_type, activities
tm = TokenizerControlMixin()
out = {"loaded": loaded}
for name, req in [("cpu", Req(ProfileReqType.START_PROFILE, ["CPU"])),
                  ("stop", Req(ProfileReqType.STOP_PROFILE, None)),
                  ("shapes", Req(ProfileReqType.START_PROFILE, ["CPU", "SHAPES"]))]:
    try:
        out[name] = asyncio.run(tm._execute_profile(req))
    except Exception as e:
        out[name] = [type(e).__mro__[1].__name__, isinstance(e, RuntimeError), getattr(e, "status_code", None),
                     str(e)]
print(json.dumps(out))
'''


def test_unarmed_startup_hook_refuses_shapes(tmp_path):
    """SGLANG_PROFILE_SHAPES unset: the hook loads nothing of ours until
    SGLang's tokenizer module is imported, then a SHAPES request fails with
    the reason (an HTTPException for the server's 400, a RuntimeError as SGLang
    fails profile requests) and any other request is SGLang's own."""
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    copy_hook(site_dir)
    env = dict(os.environ, PYTHONPATH=PKG_ROOT)
    r = subprocess.run([sys.executable, "-S", "-c", UNARMED, str(site_dir), str(tmp_path / "src"),
                        sysconfig.get_paths()["purelib"]], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["loaded"] == [False, True]
    assert out["cpu"] == "sglang: CPU" and out["stop"] == "sglang: "
    # without FastAPI (no SGLang server here) a plain RuntimeError
    with_fastapi = importlib.util.find_spec("fastapi") is not None
    assert out["shapes"] == (["HTTPException", True, 400, integ.NOT_ARMED] if with_fastapi else
                             ["Exception", True, None, integ.NOT_ARMED])
    assert "SGLANG_PROFILE_SHAPES=on_request" in integ.NOT_ARMED


def test_unarmed_startup_hook_left_behind(tmp_path):
    """The hook's line left in site-packages by a package since removed (an
    editable install's `hook install`): SGLang's tokenizer imports, as is."""
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    copy_hook(site_dir)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-S", "-c", UNARMED, str(site_dir), str(tmp_path / "src")],
                       capture_output=True, text=True, env=env, timeout=120, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["loaded"] == [False, False]
    assert out["shapes"] == "sglang: CPU,SHAPES"


def test_the_hook_line_names_the_unarmed_targets():
    """The .pth line imports the hook's module, which cannot import the
    names (it runs in every Python process): it must spell them as the
    package does."""
    from sgl_shapeprof.integrations import startup_hook
    from sgl_shapeprof.integrations.sglang.seam import TOKENIZER_CONTROL as SGLANG_TOKENIZER_CONTROL
    from sgl_shapeprof.integrations import install
    module = HOOK_FILES[1][:-len(".py")]
    line = install.pth_text()
    assert line.startswith(f"import {module}; {module}.start(") and line.count("\n") == 1
    assert startup_hook.UNARMED_TARGETS == (SGLANG_TOKENIZER_CONTROL,) == hook_module().UNARMED_TARGETS
    assert not any(isinstance(f, startup_hook._WorkerFinder) for f in sys.meta_path)   # unset: not installed


def test_phase_helpers():
    assert integ.llm_phase(types.SimpleNamespace(forward_mode=ForwardMode.DECODE)) == "decode"
    assert integ.llm_phase(None, types.SimpleNamespace(forward_mode=ForwardMode.IDLE)) == "idle"
    assert integ.llm_phase(None, None) is None


def test_hook_command_and_wheel_layout(tmp_path):
    from sgl_shapeprof.cli import main
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    assert main(["hook", "install", "--site-dir", str(site_dir)]) == 0
    from sgl_shapeprof.integrations import install
    assert (site_dir / HOOK_FILES[0]).read_text() == install.pth_text()
    assert (site_dir / HOOK_FILES[1]).read_text() == open(os.path.join(ROOT, HOOK_FILES[1])).read()
    assert main(["hook", "uninstall", "--site-dir", str(site_dir)]) == 0
    assert not any((site_dir / name).exists() for name in HOOK_FILES)
    assert main(["hook", "status", "--site-dir", str(tmp_path / "missing")]) == 2
    # a wheel carries the hook at its top level (build_py only: no compiling)
    r = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path / "lib")],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert all((tmp_path / "lib" / name).exists() for name in HOOK_FILES)
    assert (tmp_path / "lib" / HOOK_FILES[0]).read_text() == install.pth_text()
    assert (tmp_path / "lib" / "sgl_shapeprof" / "integrations" / "sglang" / "__init__.py").exists()


def test_shapes_request_names_the_profiler_dir_variable(tmp_path, monkeypatch):
    """/start_profile with SHAPES and no output_dir writes into SGLang's
    SGLANG_TORCH_PROFILER_DIR: a value that cannot be a folder is named."""
    from sgl_shapeprof.recording import env as profiler_module
    from sgl_shapeprof.recording.on_request import OnRequestProfiler
    from sgl_shapeprof.recording.requests import RequestError
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES", "on_request")
    armed = OnRequestProfiler(rank=0, output_dir=str(tmp_path), control=False)
    monkeypatch.setattr(profiler_module, "_env_profiler", armed)
    (tmp_path / "f").write_text("")
    value = str(tmp_path / "f" / "prof")  # under a file
    monkeypatch.setenv("SGLANG_TORCH_PROFILER_DIR", value)
    req = types.SimpleNamespace(output_dir=None, profile_prefix=None, profile_id="p", start_step=None,
                                num_steps=2, profile_by_stage=False, profile_stages=None)
    with pytest.raises(RequestError, match=f"^SHAPES: SGLANG_TORCH_PROFILER_DIR={value!r}: cannot create "):
        integ.shapes_request(types.SimpleNamespace(get_forward_ct=lambda: 0), req, 0)
    monkeypatch.setenv("SGLANG_TORCH_PROFILER_DIR", str(tmp_path / "ok"))
    assert integ.shapes_request(types.SimpleNamespace(get_forward_ct=lambda: 0), req, 0).startswith(
        f"SHAPES: rank 0 records 2 passes into {tmp_path / 'ok' / 'p-TP-0.shapes.jsonl'}")
    # refused (one is recording): the folders it would write in are not left behind
    busy = types.SimpleNamespace(**{**vars(req), "output_dir": str(tmp_path / "new" / "deep")})
    with pytest.raises(RequestError, match="already recording"):
        integ.shapes_request(types.SimpleNamespace(get_forward_ct=lambda: 0), busy, 0)
    assert not (tmp_path / "new").exists()
    armed.close()


@pytest.mark.parametrize("mode,role", [("decode", "decode"), ("prefill", "prefill"), ("null", None)])
def test_a_disaggregated_workers_role_is_read_from_sglang(patched_tree, tmp_path, monkeypatch, mode, role):
    """The role comes from SGLang's own runtime context (get_disagg().
    disaggregation_mode, "null" when not disaggregated): in the summary's
    worker and the file's name, so that a prefill and a decode worker of
    one rank never share a file."""
    out = tmp_path / "llm.jsonl"
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES", "1")
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_FILE", str(out))
    parallel = types.SimpleNamespace(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, pp_group=None, world_group=None)
    overrides = {"sglang.srt.runtime_context.get_parallel": lambda: parallel,
                 "sglang.srt.runtime_context.get_disagg": lambda: types.SimpleNamespace(disaggregation_mode=mode)}
    with stubbed_sglang({"sglang.srt.managers.tp_worker": str(patched_tree / FILES["tp_worker"])}, overrides):
        import sglang.srt.managers.tp_worker as tp
        monkeypatch.setattr(tp.TpModelWorker, "forward_batch_generation", _fake_forward)
        worker = tp.TpModelWorker(server_args=None, gpu_id=0, nccl_port=0, random_seed=0)
        worker.forward_batch_generation(types.SimpleNamespace(forward_mode=ForwardMode.DECODE))
        prof = vars(worker)["_sgl_shapeprof"]
    prof.close()
    assert os.path.basename(prof.path) == ("llm.jsonl" if role is None else f"llm.{role}-TP-0.jsonl")
    s = json.load(open(prof.summary_path))
    assert s["worker"].get("role") == role
