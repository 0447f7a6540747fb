"""Calls that raise, threads, fork and torch.compile: the host sees what it
would without us, and the records say what happened."""
import os
import signal
import threading

import pytest
import torch
from helpers import load, run_python

from sgl_shapeprof import ShapeProfiler, read_summary


def raising_calls():
    a = torch.randn(4, 8)
    return [
        ("shape mismatch", lambda: torch.mm(a, a)),
        ("index", lambda: a[torch.tensor([99])]),
        ("out of memory", lambda: torch.empty(2 ** 62, dtype=torch.uint8)),
        ("linalg", lambda: torch.linalg.cholesky(-torch.eye(3))),
        ("not implemented", lambda: torch.ops.aten._fft_c2c(torch.randn(4, dtype=torch.float16), [0], 0, True)),
        ("type", lambda: torch.ones(2, dtype=torch.int64).bitwise_and(torch.ones(2))),
    ]


@pytest.mark.parametrize("name,fn", raising_calls(), ids=[n for n, _ in raising_calls()])
def test_error_record_matches_what_the_caller_sees(tmp_path, name, fn):
    with pytest.raises(Exception) as plain:   # without the profiler
        fn()
    prof = ShapeProfiler(tmp_path / "e.jsonl")
    with prof.forward_pass():
        with pytest.raises(Exception) as profiled:
            fn()
    prof.close()
    assert type(profiled.value) is type(plain.value)
    assert str(profiled.value) == str(plain.value)
    errors = [r for r in load(tmp_path / "e.jsonl") if "error" in r]
    assert errors, "the raising call was not recorded"
    err = errors[-1]
    assert err["outputs"] is None
    assert err["error"]["error_type"] == type(plain.value).__name__
    assert err["error"]["error_message"] == str(plain.value)
    assert read_summary(prof.summary_path)["error_count"] == len(errors)


def test_errors_always_written_with_dedupe(tmp_path):
    a = torch.randn(4, 8)
    prof = ShapeProfiler(tmp_path / "d.jsonl", dedupe=True)
    with prof.forward_pass():
        for _ in range(3):
            with pytest.raises(RuntimeError):
                torch.mm(a, a)
    prof.close()
    assert [r["operation"] for r in load(tmp_path / "d.jsonl")] == ["aten.mm.default"] * 3


def test_only_the_pass_thread_writes(tmp_path):
    prof = ShapeProfiler(tmp_path / "t.jsonl")
    stop = threading.Event()
    seen = []

    def other():
        x = torch.randn(13, 13)
        n = 0
        while not stop.is_set() or n < 200:
            x = (x.exp() - 1).tanh()
            n += 1
        seen.append(n)

    t = threading.Thread(target=other)
    t.start()
    with prof.forward_pass():
        y = torch.randn(5, 5)
        for _ in range(300):
            y = y.sin()
    stop.set()
    t.join()
    prof.close()
    recs = load(tmp_path / "t.jsonl")
    assert seen and seen[0] >= 200
    assert len(recs) == 301
    assert all(r["inputs"].get("self", {"shape": [5, 5]})["shape"] == [5, 5] for r in recs)


FORK = r'''
import os, sys, json, torch
from sgl_shapeprof import ShapeProfiler
prof = ShapeProfiler(sys.argv[1])
prof.start_forward_pass()
torch.ones(3, 3).neg()
pid = os.fork()
if pid == 0:
    torch.ones(11, 11).neg()       # must not reach the parent's file
    prof.start_forward_pass(); torch.ones(11, 11).abs(); prof.end_forward_pass()
    sys.exit(0)                    # atexit closes: must not trim or summarise
_, status = os.waitpid(pid, 0)
torch.ones(3, 3).abs()
prof.end_forward_pass()
prof.close()
print(status)
'''


def test_forked_child_never_writes_into_parents_file(tmp_path):
    path = tmp_path / "f.jsonl"
    r = run_python(FORK.replace("sys.argv[1]", repr(str(path))))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0"
    recs = load(path)
    assert [r["operation"] for r in recs] == ["aten.ones.default", "aten.neg.default",
                                              "aten.ones.default", "aten.abs.default"]
    assert "11" not in open(path).read()
    s = read_summary(tmp_path / "f_summary.json")
    assert s["total_operations"] == 4 and s["forward_passes"] == 1


def test_torch_compile_tracing_is_not_logged(tmp_path, monkeypatch):
    """A cold compile (fresh caches) runs real ops too: benchmarking, constant
    handling. None of them is the model's."""
    import torch._dynamo
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))
    torch._dynamo.reset()

    def fn(x, w):
        return torch.relu(x @ w + 1).sum(dim=-1)

    compiled = torch.compile(fn, backend="inductor")
    x, w = torch.randn(8, 16), torch.randn(16, 4)
    prof = ShapeProfiler(tmp_path / "c.jsonl")
    with prof.forward_pass():          # pass 1: compiles, then runs
        first = compiled(x, w)
    with prof.forward_pass():          # pass 2: runs the compiled code only
        second = compiled(x, w)
    prof.close()
    assert torch.allclose(first, fn(x, w)) and torch.equal(first, second)
    recs = load(tmp_path / "c.jsonl")
    by_pass = {1: [], 2: []}
    for r in recs:
        by_pass[r["forward_pass"]].append((r["operation"], r["inputs"], r["outputs"]))
    # compiling added nothing: pass 1 logged exactly what pass 2 did
    assert by_pass[1] == by_pass[2]
    assert not any(op == "aten.relu.default" for op, _, _ in by_pass[1])


def test_meta_and_fake_tensors_are_not_logged(tmp_path):
    from torch._subclasses.fake_tensor import FakeTensorMode
    prof = ShapeProfiler(tmp_path / "m.jsonl")
    with prof.forward_pass():
        torch.ones(2, 3).exp()                       # real: logged
        m = torch.empty(4, 5, device="meta")
        (m @ torch.empty(5, 6, device="meta")).relu()  # meta: shape propagation only
        with FakeTensorMode():
            f = torch.empty(7, 8)
            (f @ f.t()).sigmoid()
        torch.ones(2, 3).neg()                       # real again
    prof.close()
    ops = [r["operation"] for r in load(tmp_path / "m.jsonl")]
    assert ops == ["aten.ones.default", "aten.exp.default", "aten.ones.default", "aten.neg.default"]


def test_backward_inside_a_pass_is_logged(tmp_path):
    """Autograd runs backward with the pass's dispatch state (on CPU on this
    thread; on GPUs on device threads that inherit it)."""
    w = torch.randn(6, 4, requires_grad=True)
    prof = ShapeProfiler(tmp_path / "b.jsonl")
    with prof.forward_pass("train"):
        loss = torch.relu(torch.randn(3, 6) @ w).sum()
        loss.backward()
    prof.close()
    ops = [r["operation"] for r in load(tmp_path / "b.jsonl")]
    assert "aten.threshold_backward.default" in ops
    assert w.grad is not None and w.grad.shape == (6, 4)


FORK_HOLDS = r'''
import os, sys, torch
from sgl_shapeprof import ShapeProfiler
path = sys.argv[1]
prof = ShapeProfiler(path)
with prof.forward_pass():
    torch.ones(2).neg()
r, w = os.pipe()
pid = os.fork()
if pid == 0:                 # a DataLoader worker, say: lives on, never profiles
    os.close(w)
    os.read(r, 1)
    os._exit(0)
os.close(r)
prof.close()
again = ShapeProfiler(path)  # the same path, while the child lives
print(again.path)
again.close()
os.close(w)
os.waitpid(pid, 0)
'''


def test_a_live_forked_child_does_not_keep_the_file_locked(tmp_path):
    path = str(tmp_path / "f.jsonl")
    r = run_python(FORK_HOLDS, args=(path,))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == path
    assert "in use" not in r.stderr


def test_a_closed_file_is_free_while_a_copy_of_its_descriptor_lives(tmp_path):
    """A forked child shares the records file's open file description (and its
    flock) until its at-fork handler closes its copy, which it may not have
    run yet when the parent closes and reopens the path (this race made the
    test above fail under load). A dup()ed descriptor is such a copy, kept
    on purpose: after close() the path must still be free."""
    path = str(tmp_path / "d.jsonl")
    prof = ShapeProfiler(path)
    with prof.forward_pass():
        torch.ones(2).neg()
    fds = [int(fd) for fd in os.listdir("/proc/self/fd")
           if os.path.realpath(f"/proc/self/fd/{fd}") == os.path.realpath(path)]
    assert len(fds) == 1
    copy = os.dup(fds[0])
    try:
        prof.close()
        again = ShapeProfiler(path)
        assert again.path == path
        again.close()
    finally:
        os.close(copy)


def test_nested_passes_never_lose_the_outer_pass(tmp_path, capsys):
    a = ShapeProfiler(tmp_path / "a.jsonl")
    b = ShapeProfiler(tmp_path / "b.jsonl")
    with a.forward_pass("outer") as logged:
        assert logged
        torch.ones(1).neg()
        with a.forward_pass("inner") as inner:      # the same profiler: one pass
            assert inner
            torch.ones(2).neg()
        torch.ones(3).neg()                         # still logged
        with b.forward_pass() as other:             # another profiler: refused
            assert other is False
            torch.ones(4).neg()
        torch.ones(5).neg()                         # still logged, into a
    with b.forward_pass() as logged_b:              # b works on its own
        assert logged_b
        torch.ones(6).neg()
    a.close()
    b.close()
    shapes = [(r["forward_pass"], r["phase"], r["inputs"].get("self", {}).get("shape"))
              for r in load(tmp_path / "a.jsonl") if r["operation"] == "aten.neg.default"]
    assert shapes == [(1, "outer", [1]), (1, "outer", [2]), (1, "outer", [3]), (1, "outer", [4]),
                      (1, "outer", [5])]
    assert [r["inputs"]["self"]["shape"] for r in load(tmp_path / "b.jsonl")
            if r["operation"] == "aten.neg.default"] == [[6]]
    err = capsys.readouterr().err
    assert err.count("is not logged") == 1
    assert read_summary(tmp_path / "a_summary.json")["forward_passes"] == 1


def test_a_begin_of_another_profiler_leaves_no_call_with_the_first(tmp_path):
    """The core's begin ends this thread's pass of any other profiler: a
    thread that goes on into an unlogged pass of q records nothing into p,
    even while another thread keeps p logging (its calls would otherwise be
    filed under that thread's pass). The raw module: ShapeProfiler refuses
    such a nested pass before the core sees it."""
    from sgl_shapeprof import _C
    p = _C.Profiler(str(tmp_path / "p.jsonl"))
    q = _C.Profiler(str(tmp_path / "q.jsonl"), skip_warmup=1)
    opened, done = threading.Event(), threading.Event()

    def keeps_p_logging():
        p.pass_begin()
        opened.set()
        done.wait()
        p.pass_end()

    t = threading.Thread(target=keeps_p_logging)
    t.start()
    opened.wait()
    try:
        assert p.pass_begin() is True
        torch.ones(2).neg()
        assert q.pass_begin() is False              # warm-up: p's pass here ended
        assert not _C.thread_enabled()
        torch.ones(7).neg()                         # in no pass that logs
        q.pass_end()
    finally:
        done.set()
        t.join(timeout=60)
    p.close()
    q.close()
    negs = [r["inputs"]["self"]["shape"] for r in load(tmp_path / "p.jsonl")
            if r["operation"] == "aten.neg.default"]
    assert negs == [[2]]
    assert load(tmp_path / "q.jsonl") == []


def test_two_threads_logging_at_once_keep_every_record_whole(tmp_path):
    """Both threads log into one file at the same time (ops release the GIL):
    records interleave, call_ids are renumbered at commit, none is torn."""
    prof = ShapeProfiler(tmp_path / "mt.jsonl")
    n = 3000
    ready, done = threading.Barrier(2), threading.Barrier(2)
    errors = []

    def worker(shape):
        try:
            x = torch.ones(*shape)
            prof.start_forward_pass()     # the second begin keeps logging on: one open pass
            ready.wait()
            for _ in range(n):
                torch.add(x, x)
            done.wait()                   # nobody ends the pass while the other still logs
        except Exception as e:            # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in ((2, 3), (3, 2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    prof.end_forward_pass()
    prof.close()
    assert not errors
    recs = load(tmp_path / "mt.jsonl")
    assert [r["call_id"] for r in recs] == list(range(1, len(recs) + 1))
    adds = [r["inputs"]["self"]["shape"] for r in recs if r["operation"] == "aten.add.Tensor"]
    assert adds.count([2, 3]) == n and adds.count([3, 2]) == n
    assert read_summary(tmp_path / "mt_summary.json")["total_operations"] == len(recs)


CLOSED_ELSEWHERE = r'''
import gc, os, sys, threading, torch
from sgl_shapeprof import ShapeProfiler
d = sys.argv[1]
prof = ShapeProfiler(os.path.join(d, "a.jsonl"))
started, closed = threading.Event(), threading.Event()
def model():
    prof.start_forward_pass()
    x = torch.ones(3)
    x.neg()
    started.set()
    closed.wait()
    for _ in range(1000):         # its pass was ended, its profiler closed and freed elsewhere
        x = x.neg()
    print("model", float(x.sum()), flush=True)
t = threading.Thread(target=model)
t.start()
started.wait()
prof.end_forward_pass()           # from another thread
prof.close()
del prof
gc.collect()
other = ShapeProfiler(os.path.join(d, "b.jsonl"))   # malloc may hand it the freed memory
closed.set()
t.join(timeout=60)
print("hung" if t.is_alive() else "joined", flush=True)
other.close()
'''


def test_closing_from_another_thread_ends_logging_safely(tmp_path):
    r = run_python(CLOSED_ELSEWHERE, args=(tmp_path,), timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["model", "3.0", "joined"]
    assert [x["operation"] for x in load(tmp_path / "a.jsonl")] == ["aten.ones.default", "aten.neg.default"]
    assert load(tmp_path / "b.jsonl") == []          # nothing landed in the later profiler's file


OWN_THREADS = r'''
import os, sys, torch
from sgl_shapeprof import ShapeProfiler
prof = ShapeProfiler(sys.argv[1])
x = torch.randn(4, 4)
for i in range(50):  # enough records (MBs) that the grower is asked for room
    with prof.forward_pass():
        for _ in range(400):
            x.add(1)
for tid in os.listdir("/proc/self/task"):
    name = open(f"/proc/self/task/{tid}/comm").read().strip()
    blocked = [l.split()[1] for l in open(f"/proc/self/task/{tid}/status") if l.startswith("SigBlk:")][0]
    print(name, blocked)
prof.close()
'''


def test_our_threads_are_named_and_leave_every_signal_to_the_host(tmp_path):
    """The grower and the flusher must never take a signal meant for the
    host (a SIGINT, SGLang's SIGCHLD/SIGQUIT handlers): each is born with
    every signal blocked, and named so that top -H and py-spy say whose it
    is. Oracle: the kernel's view, /proc/self/task/*/{comm,status}."""
    r = run_python(OWN_THREADS, args=(str(tmp_path / "t.jsonl"),))
    assert r.returncode == 0, r.stderr
    threads = dict(line.split() for line in r.stdout.splitlines())
    assert {"sp-grower", "sp-flusher"} <= set(threads), threads
    for name in ("sp-grower", "sp-flusher"):
        mask = int(threads[name], 16)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGQUIT, signal.SIGUSR1, signal.SIGALRM):
            assert mask & (1 << (sig - 1)), f"{name} takes {sig.name} ({threads[name]})"
