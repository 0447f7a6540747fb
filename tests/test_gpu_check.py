"""benchmarks/gpu_check.py rehearsed on the CPU (issue 44). A lent GPU gives
one try: a check that hangs or raises costs its own row only, within the
run's deadline; an error in one workload costs that workload's row; a
native module that does not load, or a build that fails, is a FAIL that
stops the run with a report, never a skip. The faults come from the
runner's hook, $SHAPEPROF_GPU_CHECK_FAULTS."""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")

from helpers import PKG_ROOT, ROOT  # noqa: E402

RUNNER = os.path.join(ROOT, "benchmarks", "gpu_check.py")
# what may come back from a device machine: a flat folder of at most 8 files
REPORT_FILES = {"report.md", "report.json", "build.log", "stacks.log", "children.log"}


def gpu_check(out, *args, faults="", pythonpath=PKG_ROOT, timeout=120):
    env = dict(os.environ, SHAPEPROF_GPU_CHECK_FAULTS=faults, PYTHONPATH=pythonpath)
    env.pop("SHAPEPROF_GPU_CHECK_DEADLINE", None)
    t0 = time.monotonic()
    out.parent.mkdir(parents=True, exist_ok=True)
    # --out relative to the working folder, as `make gpu-check` gives it
    r = subprocess.run([sys.executable, RUNNER, "--out", out.name, *args], capture_output=True, text=True,
                       env=env, timeout=timeout, cwd=out.parent)
    with open(out / "report.json") as f:
        report = json.load(f)
    assert set(os.listdir(out)) <= REPORT_FILES, os.listdir(out)
    return r, report, (out / "report.md").read_text(), time.monotonic() - t0


def test_a_hang_and_an_error_cost_their_own_rows_within_the_deadline(tmp_path):
    r, report, md, took = gpu_check(tmp_path, "--only", "custom_ops,kill", "--check-timeout", "10",
                                    "--deadline", "60", faults="raise:custom_ops,hang:kill")
    checks = report["checks"]
    assert r.returncode == 1, r.stderr
    assert took < 60
    assert list(checks) == ["native", "custom_ops", "kill"]
    assert checks["native"]["status"] == "pass", checks["native"]
    assert checks["custom_ops"]["status"] == "FAIL"
    assert "injected fault at custom_ops" in checks["custom_ops"]["summary"]
    kill = checks["kill"]
    assert kill["status"] == "TIMEOUT" and "no result within 10 s" in kill["summary"]
    assert any("in fault" in line for line in kill["stack"]), kill["stack"]  # where it hung, from faulthandler
    assert "| kill | TIMEOUT |" in md and "## kill: its stack" in md
    assert report["result"] == "FAIL (custom_ops, kill)"
    # what ran, for someone who reads the report away from the machine
    env = report["env"]
    import torch
    assert env["torch"] == torch.__version__ and env["python"] == sys.version.split()[0]
    assert env["commit"] and env["native"].startswith("_C.") and env["sgl_shapeprof"]
    assert all(k in env for k in ("driver", "cuda", "triton", "transformers"))
    assert report["sync_mode"]["capture"] and set(report["sync_mode"]["capture"]) <= {
        "guard", "driver", "none", "unresolved"}, report["sync_mode"]
    assert f"torch {torch.__version__}" in md and "sync mode tells a capture by:" in md


def test_an_error_in_one_workload_costs_its_row_only(tmp_path):
    r, report, md, _ = gpu_check(tmp_path, "--only", "cost", faults="raise:cost.prefill")
    cost = report["checks"]["cost"]
    assert r.returncode == 1 and cost["status"] == "FAIL", cost
    by = {row["workload"]: row for row in cost["rows"]}
    assert by["prefill 64 tokens"]["error"] == "RuntimeError: injected fault at cost.prefill"
    decode = [row for label, row in by.items() if label.startswith("decode")]
    assert len(decode) == 2 and all(row["off_ms"] > 0 and "written" in row for row in decode)
    assert "| prefill 64 tokens | RuntimeError: injected fault at cost.prefill |" in md


def test_a_native_module_that_does_not_load_fails_and_stops_the_run(tmp_path):
    pkg = tmp_path / "pkg"
    shutil.copytree(os.path.join(PKG_ROOT, "sgl_shapeprof"), pkg / "sgl_shapeprof",
                    ignore=shutil.ignore_patterns("__pycache__"))
    native = [n for n in os.listdir(pkg / "sgl_shapeprof") if n.startswith("_C.") and n.endswith(".so")]
    if not native:
        pytest.skip("no built native module to break")
    (pkg / "sgl_shapeprof" / native[0]).write_bytes(b"not a shared object\n")
    seen = subprocess.run([sys.executable, "-c", "import sgl_shapeprof; print(sgl_shapeprof.__file__)"],
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(pkg)), cwd=tmp_path)
    if not seen.stdout.startswith(str(pkg)):
        pytest.skip(f"the installed sgl_shapeprof wins over PYTHONPATH here ({seen.stdout.strip()})")
    log = tmp_path / "build.log"
    log.write_text("compiling\nthe build's last line\n")
    out = tmp_path / "out"
    r, report, md, _ = gpu_check(out, "--build-log", str(log), pythonpath=str(pkg))
    native_row = report["checks"]["native"]
    assert r.returncode == 1
    assert native_row["status"] == "FAIL" and "NativeModuleError" in native_row["summary"], native_row
    assert list(report["checks"]) == ["native"]  # stopped
    assert report["result"].startswith("FAIL (the native module did not load")
    assert "the build's last line" in md and "skip" not in md


def test_a_failed_build_is_a_report(tmp_path):
    r, report, md, _ = gpu_check(tmp_path, "--build", faults="raise:build")
    build = report["checks"]["build"]
    assert r.returncode == 1 and build["status"] == "FAIL", build
    assert list(report["checks"]) == ["build"]
    if "missing" not in build["summary"]:  # (a machine that cannot build says so instead)
        assert "injected fault at build" in md and "## build log (tail)" in md


def test_the_coverage_check_explains_kernels_by_their_launching_op_or_their_launch_record():
    # kernel_coverage on a trace built here (CUPTI's kernels need a GPU): the
    # oracle is which kernel the test put under which op
    import types
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from gpu_checks import kernel_coverage, profiler_name

    ids = iter(range(1, 100))

    def op(name, kernels, parent=None):
        return types.SimpleNamespace(name=name, device_type="DeviceType.CPU", cpu_parent=parent, id=next(ids),
                                     kernels=[types.SimpleNamespace(name=k, duration=d) for k, d in kernels])

    def kernel(name, us, linked=0):
        return types.SimpleNamespace(name=name, device_type="DeviceType.CUDA", kernels=[], cpu_parent=None,
                                     id=next(ids), linked_correlation_id=linked,
                                     time_range=types.SimpleNamespace(elapsed_us=lambda: us))
    moe = op("sglang::fused_moe", [])
    mm = op("aten::mm", [("sm90_gemm", 10.0)])
    events = [mm, op("aten::copy_", [("copy_kernel", 5.0)], parent=moe),  # inside a recorded custom op
              op("aten::add", [("add_kernel", 3.0)]),  # its op not recorded
              kernel("fused_moe_kernel", 20.0),  # a Triton launch from Python: no op
              kernel("Memcpy HtoD (Pageable -> Device)", 50.0),  # a copy, not a kernel
              kernel("mystery_kernel", 7.0), moe,
              op("flashinfer:norm.rmsnorm", [("RMSNormKernel", 4.0)])]  # a library call's range
    # torch keeps each kernel an op launched as an event of its own too, linked to the op: counted once
    events += [kernel(k.name, k.duration, linked=e.id) for e in list(events) if e.kernels for k in e.kernels]
    recorded = {"aten.mm.default", "sglang.fused_moe.default", "flashinfer:norm.rmsnorm",
                "triton:sglang.kernels.ops.moe.fused_moe_triton_kernels.fused_moe_kernel"}
    n_ok, n, us_ok, us, missing = kernel_coverage(events, recorded)
    assert (n_ok, n, us_ok, us) == (4, 6, 39.0, 49.0)
    assert missing == {"add_kernel": [1, 3.0], "mystery_kernel": [1, 7.0]}
    assert profiler_name("aten.mm.default") == "aten::mm" and profiler_name("aten.add.Tensor") == "aten::add"
