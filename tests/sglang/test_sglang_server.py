"""SGLang 0.5.23's real HTTP server on CPU, armed with
SGLANG_PROFILE_SHAPES=on_request: shapes recorded on POST /start_profile with
"SHAPES" and stopped by num_steps or /stop_profile, without a restart and
without SGLang's torch profiler (make test-sglang sets the environment up)."""
import glob
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from helpers import PKG_ROOT, load, needs_sglang, post_status
from sglang_engine_helpers import (OVERLAY, PROBE, SGLANG_VERSION, STUBS, outputs_last_dim, workers_said_by_sglang,
                                   zero_edit_hook_installed)

pytestmark = needs_sglang(SGLANG_VERSION)


def _port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _post(url, body=None, timeout=120):
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class Server:
    def __init__(self, model, tmp_path, switch="on_request", tp=1, pp=1, dp=1, patched=None, extra_env=None):
        """patched: a tree of SGLang files with patches/ applied, loaded
        instead of the installed ones (else the zero-edit start-up hook)."""
        workers = tp * pp * dp
        if not patched and not zero_edit_hook_installed():
            pytest.skip("the zero-edit start-up hook is not in site-packages")
        env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_PROFILE_SHAPES")}
        ncpu = os.cpu_count() or 1
        paths = [STUBS, PKG_ROOT]
        if patched:
            paths.insert(0, OVERLAY)
            env["SHAPEPROF_PATCHED_TREE"] = str(patched)
        env.update(PYTHONPATH=os.pathsep.join(paths), SGLANG_USE_CPU_ENGINE="1",
                   HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   SGLANG_NCCL_SO_PATH="/nonexistent/libnccl.so.2",
                   SGLANG_CPU_OMP_THREADS_BIND="|".join(str(i % ncpu) for i in range(workers)) if workers > 1
                   else f"0-{ncpu - 1}")
        if switch is not None:   # None: started without any SGLANG_PROFILE_SHAPES* variable
            env.update(SGLANG_PROFILE_SHAPES=switch, SGLANG_PROFILE_SHAPES_RANK="all",
                       SGLANG_PROFILE_SHAPES_FILE=str(tmp_path / "env_shapes.jsonl"))
        env.update(extra_env or {})
        log_path = tmp_path / "server.log"
        # A free port is only free when _port() looks: another process (an
        # earlier server's workers, SGLang's own internal ports) may bind it
        # before this server does, which then waits forever instead of
        # exiting. Start again on another port then.
        for _ in range(3):
            self.port = _port()
            self.url = f"http://127.0.0.1:{self.port}"
            self.log = open(log_path, "w")
            self.p = subprocess.Popen(
                [sys.executable, "-m", "sglang.launch_server", "--model-path", str(model), "--device", "cpu",
                 "--attention-backend", "torch_native", "--sampling-backend", "pytorch", "--disable-cuda-graph",
                 "--host", "127.0.0.1", "--port", str(self.port), "--mem-fraction-static", "0.05",
                 "--max-total-tokens", "2048", "--context-length", "256", "--max-running-requests", "8",
                 "--chunked-prefill-size", "256", "--grammar-backend", "none", "--tp-size", str(tp),
                 "--pp-size", str(pp), "--dp-size", str(dp)],
                env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
            if self._wait_ready(log_path):
                return
            self.stop()
        pytest.fail("server not ready: its port was taken three times: " + log_path.read_text()[-3000:])

    def _wait_ready(self, log_path) -> bool:
        """True when /health answers; False when the port was taken first."""
        deadline = time.monotonic() + 240
        while True:
            assert self.p.poll() is None, "server died: " + log_path.read_text()[-3000:]
            log = log_path.read_text(errors="replace")
            if "address already in use" in log:
                return False
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            assert time.monotonic() < deadline, "server not ready: " + log[-3000:]
            time.sleep(0.5)

    def generate(self, n=6):
        status, body = _post(self.url + "/generate", {
            "text": "the capital of france is",
            "sampling_params": {"max_new_tokens": n, "temperature": 0, "ignore_eos": True}})
        assert status == 200, body
        return json.loads(body)

    def stop(self):
        try:
            os.killpg(self.p.pid, signal.SIGKILL)   # SGLang's own way of ending workers
        except ProcessLookupError:
            pass
        self.p.wait(timeout=60)
        self.log.close()


def _cached_tokens_in_window(log_path, records_path) -> int:
    """The prompt tokens SGLang's scheduler took from its prefix cache
    ("Prefill batch, ... #cached-token: N") between our window's opening
    line naming records_path and its "stopped" line, from the server's log."""
    cached, inside = 0, False
    for line in log_path.read_text(errors="replace").splitlines():
        if str(records_path) in line:
            inside = " records passes " in line
        elif inside and "Prefill batch" in line:
            cached += int(re.search(r"#cached-token: (\d+)", line).group(1))
    return cached


def _wait_summary(path, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            s = json.load(open(path))
            if s.get("ended_by") == "close":
                return s
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"no closed summary at {path}")


def test_start_profile_shapes_num_steps_stop_and_errors(models, tmp_path):
    srv = Server(models / "tiny-llama", tmp_path)
    try:
        out = tmp_path / "prof"
        # names are names and counts whole numbers: refused whole (a 400 in
        # one line) before any rank takes it, and nothing is created
        bad = tmp_path / "bad" / "deeper"
        for wrong, says in (({"profile_id": "../../esc"}, "is not a name"),
                            ({"profile_prefix": "a/b"}, "is not a name"),
                            ({"profile_id": "x" * 300}, "is not a name"),
                            ({"num_steps": -1}, "is not a whole number")):
            status, body = _post(srv.url + "/start_profile",
                                 {"activities": ["SHAPES"], "num_steps": 2, "output_dir": str(bad), **wrong})
            assert status == 400 and says in json.loads(body)["message"], (wrong, status, body)
        assert not (tmp_path / "bad").exists() and not glob.glob(str(tmp_path / "esc*"))
        # SHAPES only, 3 steps: the reply says what started, per rank
        status, body = _post(srv.url + "/start_profile",
                             {"activities": ["SHAPES"], "num_steps": 3, "output_dir": str(out),
                              "profile_prefix": "run1"})
        assert status == 200, body
        assert "SHAPES: rank 0 records 3 passes into" in body
        path = body.split("passes into ")[1].split()[0]   # made at the next pass start
        assert os.path.basename(path).startswith("run1-") and path.endswith("-TP-0.shapes.jsonl")
        srv.generate(6)
        s = _wait_summary(path.replace(".jsonl", "_summary.json"))
        assert s["logged_forward_passes"] == 3
        recs = [json.loads(line) for line in open(path)]
        assert {r.get("phase") for r in recs} <= {"extend", "decode"} and len(recs) > 10
        assert not glob.glob(str(out / "*.trace.json*"))  # SGLang's torch profiler never started
        assert not any("time_us" in r for r in recs)  # the server was armed untimed
        # until /stop_profile, timed by the request's SHAPES_TIME alone (it
        # asks for shapes too); a second start while it runs is refused
        status, body = _post(srv.url + "/start_profile", {"activities": ["SHAPES_TIME"], "output_dir": str(out)})
        assert status == 200 and "records passes until /stop_profile (time) into" in body, body
        status, body = _post(srv.url + "/start_profile", {"activities": ["SHAPES"], "output_dir": str(out)})
        assert status == 400 and "already recording" in body, body
        srv.generate(4)
        status, body = _post(srv.url + "/stop_profile")
        assert status == 200 and "SHAPES: rank 0 stopped; records in" in body, body
        second = body.split("records in ")[1].split()[0]
        timed_summary = json.load(open(second.replace(".jsonl", "_summary.json")))
        assert second != path and timed_summary["logged_forward_passes"] >= 4 and timed_summary["time_origin_ns"] > 0
        timed = [json.loads(line) for line in open(second)]
        assert timed and all(r["time_us"] >= 0 and r["start_us"] >= 0 for r in timed)
        # the server serves on, and nothing records any more
        before = os.path.getsize(second)
        assert srv.generate(3)["meta_info"]["completion_tokens"] == 3
        assert os.path.getsize(second) == before
        assert not os.path.exists(tmp_path / "env_shapes.jsonl")  # armed: nothing recorded at start-up
    finally:
        srv.stop()


def test_start_profile_shapes_with_profile_v2(models, tmp_path):
    """SGLANG_PROFILE_V2=1 takes SGLang's other profiler (ProfileManager):
    SHAPES works the same, alone and beside CPU."""
    srv = Server(models / "tiny-llama", tmp_path, extra_env={"SGLANG_PROFILE_V2": "1"})
    try:
        out = tmp_path / "prof"
        status, body = _post(srv.url + "/start_profile",
                             {"activities": ["SHAPES"], "num_steps": 2, "output_dir": str(out)})
        assert status == 200 and "SHAPES: rank 0 records 2 passes into" in body, body
        path = body.split("passes into ")[1].split()[0]
        srv.generate(4)
        assert _wait_summary(path.replace(".jsonl", "_summary.json"))["logged_forward_passes"] == 2
        assert not os.listdir(out) or all(f.endswith(".json") or f.endswith(".jsonl") for f in os.listdir(out))
        # beside SGLang's own profiler (V2 takes profile_by_stage requests only)
        status, body = _post(srv.url + "/start_profile",
                             {"activities": ["CPU", "SHAPES"], "num_steps": 2, "profile_by_stage": True,
                              "output_dir": str(out)})
        assert status == 200 and "SHAPES: rank 0 records 2 passes per stage into" in body, body
        second = body.split("stage into ")[1].split()[0]
        srv.generate(4)
        srv.generate(4)
        s = _wait_summary(second.replace(".jsonl", "_summary.json"))
        assert s["phase_passes"] == {"extend": 2, "decode": 2}
        assert srv.generate(2)["meta_info"]["completion_tokens"] == 2
    finally:
        srv.stop()


# Each switch on the zero-edit hook (its .pth's own finder when unset, its
# armed finder with 1), the patched tree once (a server start is ~35 s of CI).
@pytest.mark.parametrize("way, switch", [("zero-edit", None), ("zero-edit", "1"), ("patched", None)],
                         ids=["zero-edit-unset", "zero-edit-1", "patched-unset"])
def test_shapes_on_a_server_not_armed_is_an_error(models, patched_tree, tmp_path, way, switch):
    """Not started with on_request (the variable unset: SGLang alone would
    answer "Start profiling." and record nothing; or 1: recording from the
    start): a SHAPES request is a 400 naming the variable, and nothing starts,
    SGLang's own profiler included. Other requests get SGLang's answers."""
    srv = Server(models / "tiny-llama", tmp_path, switch=switch,
                 patched=patched_tree if way == "patched" else None)
    try:
        out = tmp_path / "prof"
        for activities in (["SHAPES"], ["CPU", "SHAPES"]):
            status, body = _post(srv.url + "/start_profile",
                                 {"activities": activities, "num_steps": 2, "output_dir": str(out)})
            assert status == 400, body
            assert "not started with SGLANG_PROFILE_SHAPES=on_request" in json.loads(body)["message"], body
        assert srv.generate(3)["meta_info"]["completion_tokens"] == 3
        assert not out.exists()
        status, body = _post(srv.url + "/start_profile",
                             {"activities": ["CPU"], "num_steps": 1, "output_dir": str(out)})
        assert (status, body) == (200, "Start profiling.\n")
        assert srv.generate(2)["meta_info"]["completion_tokens"] == 2
    finally:
        srv.stop()


def test_tp2_every_rank_answers_and_profile_by_stage(models, tmp_path):
    srv = Server(models / "tiny-llama", tmp_path, tp=2)
    try:
        out = tmp_path / "prof"
        status, body = _post(srv.url + "/start_profile",
                             {"activities": ["SHAPES"], "num_steps": 2, "profile_by_stage": True,
                              "output_dir": str(out)})
        assert status == 200, body
        lines = [ln for ln in body.splitlines() if ln.startswith("SHAPES:")]
        assert [ln.split()[2] for ln in lines] == ["0", "1"], body   # one line per rank
        paths = [ln.split("passes per stage into ")[1] for ln in lines]
        # prompts long enough for one extend pass each, then decode
        for _ in range(2):
            srv.generate(4)
        for rank, path in enumerate(paths):
            s = _wait_summary(path.replace(".jsonl", "_summary.json"))
            assert s["rank"] == rank
            assert s["phase_passes"] == {"extend": 2, "decode": 2}, s["phase_passes"]
            recs = [json.loads(line) for line in open(path)]
            assert any(r["operation"].startswith("c10d.") or "all_reduce" in r["operation"] for r in recs)
        # All ranks or none: rank 1 refuses (its file's name and every
        # numbered one beside it are taken), so rank 0 takes its request
        # back and removes the file it had created.
        clash = tmp_path / "clash"
        clash.mkdir()
        (clash / "c-TP-1.shapes.jsonl").touch()
        for n in range(1, 1000):
            (clash / f"c-TP-1.shapes.{n}.jsonl").touch()
        before = sorted(os.listdir(clash))
        status, body = _post(srv.url + "/start_profile", {"activities": ["SHAPES"], "num_steps": 1,
                                                          "output_dir": str(clash), "profile_id": "c"})
        assert status == 400 and "SHAPES: the request was refused; no rank records it" in body, body
        assert "SHAPES: rank 1: cannot record into" in body, body
        assert sorted(os.listdir(clash)) == before
        srv.generate(2)                          # nothing records: rank 0's request was taken back
        assert sorted(os.listdir(clash)) == before
    finally:
        srv.stop()


@pytest.mark.parametrize("dim", ["pp", "dp"])
def test_pp2_dp2_every_worker_records_and_the_reply_says_where(models, tmp_path, dim):
    """/start_profile on a PP=2 and on a DP=2 server: every stage or replica
    takes the request and records into its own file, named as SGLang names
    its traces, its summary stating the worker SGLang's get_parallel() says
    the process is (the oracle, read by test code in each worker). SGLang
    replies with one TP group's answer: the reply says so and where the
    others' files are, instead of leaving them out unsaid."""
    par = tmp_path / "par"
    par.mkdir()
    srv = Server(models / "tiny-llama", tmp_path, **{dim: 2}, extra_env={
        "PYTHONPATH": os.pathsep.join([STUBS, PKG_ROOT, PROBE]), "SGLENV_PARALLEL": str(par)})
    try:
        out = tmp_path / "prof"
        status, body = _post(srv.url + "/start_profile", {"activities": ["SHAPES"], "num_steps": 2,
                                                          "profile_prefix": "p", "output_dir": str(out)})
        assert status == 200, body
        lines = [ln for ln in body.splitlines() if ln.startswith("SHAPES:")]
        assert len(lines) == 2, body
        mine = lines[0].split("(")[1].split(")")[0]           # TP-0-PP-0, TP-0-DP-1, ...
        other = {"pp": f"PP stage {1 - int(mine[-1])} of 2", "dp": f"DP replica {1 - int(mine[-1])} of 2"}[dim]
        pattern = {"pp": "TP-*-PP-*", "dp": "TP-*-DP-*"}[dim]
        assert lines[1].startswith(f"SHAPES: {other} took the same request"), body
        profile_id = os.path.basename(lines[0].split(" into ")[1]).split("-")[1]
        assert f"p-{profile_id}-{pattern}.shapes.jsonl in that folder" in lines[1], body
        for _ in range(3):
            srv.generate(4)
        said = workers_said_by_sglang(par)
        files = sorted(glob.glob(str(out / f"p-*-{pattern}.shapes.jsonl")))
        assert len(files) == 2, (files, os.listdir(out))
        for f in files:
            summary = _wait_summary(f.replace(".jsonl", "_summary.json"))
            w, s = summary["worker"], said[summary["worker"]["pid"]]
            assert (w["tp_rank"], w["pp_rank"], w["pp_size"], w["dp_size"]) == \
                (s["tp_rank"], s["pp_rank"], s["pp_size"], s["num_dp_ranks"])
            if dim == "dp":
                assert w["dp_rank"] == s["dp_rank"]
            name = f"TP-{w['tp_rank']}-{dim.upper()}-{w[dim + '_rank']}"
            assert f.endswith(f"-{name}.shapes.jsonl")
            assert summary["logged_forward_passes"] == 2, summary
            recs = [json.loads(line) for line in open(f)]
            embeds = [r for r in recs if r["operation"] == "aten.embedding.default"]
            first, last = w["pp_rank"] == 0, w["pp_rank"] == w["pp_size"] - 1
            assert bool(embeds) == first and bool(outputs_last_dim(recs, 1024)) == last, f
    finally:
        srv.stop()


def _hostile_bodies(rng, out):
    """Bounded, seeded: /start_profile bodies a stranger could send."""
    names = ["../../esc", "a/b", "x" * 300, "nul\0", "ok", "é" * 60, "..", "", " ", "$(touch PWNED)"]
    values = [None, -1, 0, 1, 2, 2**63, 1.5, "3", "", True, [], {}, [1, [2]], {"a": {"b": 1}}, "SHAPES",
              "x" * 5000]
    keys = ["num_steps", "start_step", "output_dir", "profile_id", "profile_prefix", "profile_by_stage",
            "profile_stages", "merge_profiles", "with_stack", "record_shapes", "activities", "unknown"]
    for i in range(200):
        if i % 25 == 0:   # not JSON at all, or nested too deep
            yield ["{", "[" * 5000, "\xff\xfe", "null", "[]", "1", "{\"activities\": \"SHAPES\"}",
                   "{\"activities\": [\"SHAPES\"], \"num_steps\": 1e999}"][i // 25]
            continue
        body = {"activities": rng.choice([["SHAPES"], ["SHAPES", "SHAPES"], ["SHAPES", 7], ["SHAPES", None]]),
                "output_dir": str(out / str(i))}
        for k in rng.sample(keys, rng.randint(1, 5)):
            body[k] = rng.choice(names if k in ("profile_id", "profile_prefix", "output_dir") else values)
        if isinstance(body.get("output_dir"), str) and not body["output_dir"].startswith(str(out)):
            body["output_dir"] = str(out / str(i) / body["output_dir"].replace("/", "_").replace("\0", "_"))
        yield json.dumps(body)


def test_hostile_start_profile_bodies_leave_the_server_serving(models, tmp_path):
    """200 random and hostile bodies against the real server (issue 40):
    each gets an answer, the server still serves, no worker died, and
    nothing is written outside the folders the requests named."""
    import random
    import psutil
    srv = Server(models / "tiny-llama", tmp_path)
    try:
        out = tmp_path / "fuzz"
        workers = psutil.Process(srv.p.pid).children(recursive=True)
        before = set(os.listdir(tmp_path)) | {"fuzz"}
        codes = {}
        for body in _hostile_bodies(random.Random(4040), out):
            code = post_status(srv.url + "/start_profile", body.encode("utf-8", "surrogatepass"), timeout=60)
            codes[code] = codes.get(code, 0) + 1
            assert code < 500, (code, body[:200])
            _post(srv.url + "/stop_profile")   # whatever started, stops
        assert srv.generate(3)["meta_info"]["completion_tokens"] == 3
        assert all(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers)
        assert set(os.listdir(tmp_path)) <= before | {"server.log"}, set(os.listdir(tmp_path)) - before
        assert not glob.glob(str(tmp_path.parent / "esc*")) and not os.path.exists("PWNED")
        assert codes.get(200, 0) and codes.get(400, 0), codes   # some taken, some refused
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def armed_server(models, tmp_path_factory):
    """One armed server (one start) for the tests that only need it serving."""
    tmp = tmp_path_factory.mktemp("armed")
    srv = Server(models / "tiny-llama", tmp)
    yield srv, tmp
    srv.stop()


def test_concurrent_profile_requests_get_their_own_replies(armed_server):
    """Each reply is its own request's: two SHAPES starts at the same moment
    (one records, the other is told why not), and starts and stops while
    other clients' refused requests pass through the same middleware
    without end. The replies' SHAPES lines once lived on the tokenizer
    manager, where another request could take or clear them."""
    srv, tmp = armed_server
    out = tmp / "race"
    together = threading.Barrier(2)
    replies = {}

    def start(profile_id):
        together.wait(timeout=60)
        replies[profile_id] = _post(srv.url + "/start_profile",
                                    {"activities": ["SHAPES"], "profile_id": profile_id, "output_dir": str(out)})
    threads = [threading.Thread(target=start, args=(pid,)) for pid in ("first", "second")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    won = [pid for pid, (status, _) in replies.items() if status == 200]
    assert len(won) == 1, replies
    (won,), (lost,) = won, {"first", "second"} - set(won)
    path = out / f"{won}-TP-0.shapes.jsonl"
    assert f"records passes until /stop_profile into {path}" in replies[won][1], replies
    assert replies[lost][0] == 400 and f"already recording into {path}; stop it first" in replies[lost][1], replies
    status, body = _post(srv.url + "/stop_profile")
    assert status == 200 and f"stopped; records in {path}" in body, body

    # refused by the tokenizer (no scheduler round trip), as fast as clients send
    done = threading.Event()
    refused, wrong = [0] * 6, []

    def refuse(client):
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        while not done.is_set():
            name = f"bad/{client}-{refused[client]}"
            conn.request("POST", "/start_profile", json.dumps({"activities": ["SHAPES"], "profile_id": name}),
                         {"Content-Type": "application/json"})
            r = conn.getresponse()
            body = r.read().decode()
            if r.status != 400 or f"profile_id {name!r} is not a name" not in body:
                wrong.append((name, r.status, body))
            refused[client] += 1
        conn.close()
    clients = [threading.Thread(target=refuse, args=(c,)) for c in range(len(refused))]
    for c in clients:
        c.start()
    try:
        before = sum(refused)
        for i in range(30):
            path = out / f"own{i}-TP-0.shapes.jsonl"
            status, body = _post(srv.url + "/start_profile",
                                 {"activities": ["SHAPES"], "profile_id": f"own{i}", "output_dir": str(out)})
            assert status == 200 and f"into {path}" in body, (i, status, body)
            status, body = _post(srv.url + "/stop_profile")
            assert status == 200 and f"stopped; records in {path}" in body, (i, status, body)
        during = sum(refused) - before
    finally:
        done.set()
        for c in clients:
            c.join(timeout=120)
    assert not wrong, wrong[:3]
    assert during >= 30, refused   # the refused requests really ran alongside


def _in_flight(srv) -> int:
    """Requests the scheduler is running or holding (SGLang's /v1/loads)."""
    with urllib.request.urlopen(srv.url + "/v1/loads?include=core", timeout=60) as r:
        return sum(load["num_running_reqs"] + load["num_waiting_reqs"] for load in json.load(r)["loads"])


def _wait_in_flight(srv, n, deadline, why):
    while _in_flight(srv) != n:
        assert time.monotonic() < deadline, why
        time.sleep(0.05)


def test_client_disconnect_aborts_generation(armed_server):
    """A client that goes away mid-generation is aborted by SGLang, streaming
    (StreamingResponse sees the disconnect) or not (SGLang polls
    request.is_disconnected(), which behind a BaseHTTPMiddleware, ours once,
    answers False forever): our middleware leaves /generate alone."""
    srv, tmp = armed_server
    step, n = 0.1, 200   # SGLang's test hook: 20 s of decoding unless aborted
    assert _post(srv.url + "/slow_down", {"forward_sleep_time": step})[0] == 200
    try:
        for stream in (True, False):
            conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
            conn.request("POST", "/generate", json.dumps({
                "text": "the capital of france is", "stream": stream,
                "sampling_params": {"max_new_tokens": n, "temperature": 0, "ignore_eos": True}}),
                {"Content-Type": "application/json"})
            if stream:
                r = conn.getresponse()
                assert r.status == 200 and r.readline().startswith(b"data: "), r.status
            else:
                _wait_in_flight(srv, 1, time.monotonic() + 60, "the request never ran")
            conn.sock.shutdown(socket.SHUT_RDWR)
            conn.close()
            _wait_in_flight(srv, 0, time.monotonic() + n * step / 2,
                            f"stream={stream}: still generating after its client left (not aborted)")
    finally:
        _post(srv.url + "/slow_down", {"forward_sleep_time": None})
    assert "Request is disconnected from the client side" in (tmp / "server.log").read_text(errors="replace")
    assert srv.generate(3)["meta_info"]["completion_tokens"] == 3


def test_run_url_drives_a_running_server_with_the_workload(models, tmp_path):
    """run --url: a server started elsewhere, armed; SHAPES asked through
    its /start_profile (timed: --time), 8 requests of exactly 16 token ids sent, 4 in
    flight, 5 tokens each, the window closed with /stop_profile; the reply's
    files analyzed here. The oracle is the request: every prompt's 16 rows
    in the extend passes, never more than 4 rows in a decode pass, and 4 in
    its steady state, and the server's own token counts."""
    srv = Server(models / "tiny-llama", tmp_path)
    try:
        out = tmp_path / "url"
        r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "run", "--server", "sglang", "--url", srv.url,
                            "--model-path", str(models / "tiny-llama"), "--num-prompts", "8", "--isl", "16",
                            "--osl", "5", "--concurrency", "4", "--time", "-o", str(out)],
                           capture_output=True, text=True, timeout=600, cwd=str(tmp_path))
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        # the same through a srtctl job file: its aggregated role's window, 6 passes from now, into agg/
        (tmp_path / "job.yaml").write_text(
            "resources: {gpu_type: h200, agg_nodes: 1, agg_workers: 1}\n"
            "profiling: {type: shapes, aggregated: {stop_step: 6}}\n"
            "benchmark: {type: sglang-bench, isl: 16, osl: 5, concurrencies: [4]}\n")
        spec = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "run", "--spec", "job.yaml", "--url", srv.url,
                               "--model-path", str(models / "tiny-llama"), "--num-prompts", "8", "-o", "profiles"],
                              capture_output=True, text=True, timeout=600, cwd=str(tmp_path))
        assert spec.returncode == 0, spec.stdout[-3000:] + spec.stderr[-3000:]
    finally:
        srv.stop()
    (agg,) = (tmp_path / "profiles" / "agg").glob("*.shapes.jsonl")
    summary = json.load(open(str(agg)[:-len(".jsonl")] + "_summary.json"))
    assert summary["logged_forward_passes"] == 6, summary
    assert json.load(open(tmp_path / "profiles" / "agg" / "outputs.json"))["outputs"] == [[16, 5]] * 8
    assert "SHAPES: rank 0 records passes until /stop_profile (time) into " in r.stderr
    assert json.load(open(out / "outputs.json"))["outputs"] == [[16, 5]] * 8  # the server's counts
    files = sorted(out.glob("*.shapes.jsonl"))
    assert len(files) == 1 and f"{files[0]}: " in r.stdout
    rows = {}
    timed = load(str(files[0]))
    assert all(rec["time_us"] >= 0 for rec in timed)   # --time: the activity SHAPES_TIME
    assert not any("time_us" in rec for rec in load(str(agg)))   # the job file's run did not ask
    for rec in timed:
        x, w = rec["inputs"].get("self"), rec["inputs"].get("mat2")
        if rec["operation"] == "aten.mm.default" and w and w["shape"] == [64, 128] and x["shape"][-1] == 64:
            rows.setdefault((rec["forward_pass"], rec["phase"]), []).append(x["shape"][0])
    extend = sum(v[0] for (_, phase), v in rows.items() if phase == "extend")
    decode = [v[0] for (_, phase), v in rows.items() if phase == "decode"]
    # every prompt's 16 rows, less what the server's prefix cache held (its
    # scheduler's own count, logged per prefill batch inside our window)
    assert extend == 8 * 16 - _cached_tokens_in_window(tmp_path / "server.log", files[0]), rows
    assert decode and max(decode) == 4 and sum(decode) == 8 * (5 - 1), rows
