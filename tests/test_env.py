"""SGLang's environment-variable contract, rank selection, and off-means-off."""
import json
import os

import pytest
import torch
from helpers import load, run_python

import sgl_shapeprof
from sgl_shapeprof.recording.config import ConfigError, read_env, records_path_for_rank


def test_defaults():
    cfg = read_env({})
    assert (cfg.enabled, cfg.ranks, cfg.path, cfg.skip_warmup, cfg.log_n_passes, cfg.dedupe) == \
        (False, frozenset({0}), "shapes.jsonl", 0, 0, None)


@pytest.mark.parametrize("name,value", [
    ("SGLANG_PROFILE_SHAPES", "yes"),
    ("SGLANG_PROFILE_SHAPES_RANK", "first"),
    ("SGLANG_PROFILE_SHAPES_RANK", "-1"),
    ("SGLANG_PROFILE_SHAPES_RANK", "0,,1"),
    ("SGLANG_PROFILE_SHAPES_SKIP_WARMUP", "2.5"),
    ("SGLANG_PROFILE_SHAPES_SKIP_WARMUP", "-3"),
    ("SGLANG_PROFILE_SHAPES_LOG_N_PASSES", "ten"),
    ("SGLANG_PROFILE_SHAPES_DEDUPE", "2"),
    ("SGLANG_PROFILE_SHAPES_PHASES", "decode;prefill"),
    ("SGLANG_PROFILE_SHAPES_SKIP_WARMUP", str(2 ** 63)),
    ("SGLANG_PROFILE_SHAPES_LOG_N_PASSES", "9" * 30),
    ("SGLANG_PROFILE_SHAPES_RANK", str(2 ** 64)),
])
def test_bad_value_one_line_and_off(monkeypatch, capsys, tmp_path, name, value):
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES", "1")
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_FILE", str(tmp_path / "s.jsonl"))
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError):
        read_env()
    assert sgl_shapeprof.from_env() is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert name in err[0] and repr(value) in err[0] and "profiling is off" in err[0]
    assert not (tmp_path / "s.jsonl").exists()



@pytest.mark.parametrize("name,value,says", [
    ("RANK", "1180591620717411303424", "is too large"),
    ("RANK", "one", "is not an integer"),
    ("RANK", "-1", "must not be negative"),
    ("RANK", "2.0", "is not an integer"),
    ("LOCAL_RANK", str(2 ** 63), "is too large"),
    ("LOCAL_RANK", "0x1", "is not an integer"),
])
@pytest.mark.parametrize("selected", ["all", "0"])
def test_bad_torch_rank_variable_one_line_and_off(monkeypatch, capsys, tmp_path, name, value, says, selected):
    """torch's own RANK / LOCAL_RANK (read to find this process's rank): one
    line naming the variable and its value, as for our own variables."""
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES", "1")
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_RANK", selected)
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_FILE", str(tmp_path / "s.jsonl"))
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=f"^{name}={value!r} {says}"):
        sgl_shapeprof.resolve_rank()
    assert sgl_shapeprof.from_env() is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"{name}={value!r} {says}" in err[0] and "profiling is off" in err[0], err
    assert "OverflowError" not in err[0]
    assert not list(tmp_path.iterdir())


def test_rank_argument_out_of_range_is_a_value_error(tmp_path):
    # the core counts ranks in 64-bit integers: a bigger one is a ValueError
    # that says so, not an OverflowError from the C conversion
    for rank in (2 ** 63, 2 ** 70):
        with pytest.raises(ValueError, match="rank must be at most"):
            sgl_shapeprof.ShapeProfiler(str(tmp_path / "r.jsonl"), rank=rank)
        with pytest.raises(ValueError, match="rank must be at most"):
            sgl_shapeprof.resolve_rank(rank)
    assert not list(tmp_path.iterdir())

def test_from_env_settings_and_singleton(monkeypatch, tmp_path):
    path = tmp_path / "e.jsonl"
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES", "1")
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_FILE", str(path))
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_SKIP_WARMUP", "1")
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_LOG_N_PASSES", "2")
    prof = sgl_shapeprof.from_env(rank=0, dedupe_default=True)
    assert prof is not None and prof.dedupe is True
    assert sgl_shapeprof.from_env(rank=0) is prof
    x = torch.randn(3)
    for _ in range(4):
        with prof.forward_pass():
            x.exp()
            x.exp()
    prof.close()
    recs = load(path)
    # pass 1 is warm-up; pass 2 writes exp once; pass 3 repeats it (deduped); pass 4 is past the limit
    assert [r["forward_pass"] for r in recs] == [2]
    s = json.load(open(prof.summary_path))
    assert (s["forward_passes"], s["logged_forward_passes"], s["dedupe_skipped_count"]) == (4, 2, 3)
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_DEDUPE", "0")
    prof2 = sgl_shapeprof.from_env(rank=0, dedupe_default=True)
    assert prof2 is not prof and prof2.dedupe is False
    prof2.close()


def test_rank_selection(monkeypatch, tmp_path):
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES", "1")
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_FILE", str(tmp_path / "r.jsonl"))
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_RANK", "1")
    assert sgl_shapeprof.from_env(rank=0) is None
    monkeypatch.setenv("RANK", "1")
    p = sgl_shapeprof.from_env()
    assert p is not None and p.rank == 1 and p.path == str(tmp_path / "r.jsonl")
    p.close()
    monkeypatch.delenv("RANK")
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert sgl_shapeprof.resolve_rank() == 3
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_RANK", "all")
    p = sgl_shapeprof.from_env()
    assert p.path == str(tmp_path / "r.rank3.jsonl")
    p.close()


def test_rank_file_naming():
    assert records_path_for_rank("shapes.jsonl", 2, several=False) == "shapes.jsonl"
    assert records_path_for_rank("out/shapes.jsonl", 2, several=True) == os.path.join("out", "shapes.rank2.jsonl")
    assert records_path_for_rank("run-{rank}.jsonl", 5, several=False) == "run-5.jsonl"
    assert records_path_for_rank("noext", 1, several=True) == "noext.rank1"


def test_unwritable_path_is_one_line_and_off(monkeypatch, capsys):
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES", "1")
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_FILE", "/nonexistent/dir/s.jsonl")
    assert sgl_shapeprof.from_env() is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "/nonexistent/dir" in err[0]
    assert "SGLANG_PROFILE_SHAPES_FILE='/nonexistent/dir/s.jsonl'" in err[0]



def test_default_path_that_cannot_be_written_names_the_variable(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES", "1")
    monkeypatch.delenv("SGLANG_PROFILE_SHAPES_FILE", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "shapes.jsonl").mkdir()  # stops root too
    assert sgl_shapeprof.from_env() is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "sgl_shapeprof: SGLANG_PROFILE_SHAPES_FILE unset (default 'shapes.jsonl'): "), err
    assert "profiling is off" in err[0]

@pytest.mark.parametrize("label,recorded", [("de\0code", "de\\0code"), ("x\udc80y", "x\\udc80y")])
def test_a_bad_phase_label_is_escaped_and_profiling_goes_on(tmp_path, capsys, label, recorded):
    import torch
    from sgl_shapeprof.recording import messages
    messages._said.discard("label")   # said once per process: forget an earlier test's
    prof = sgl_shapeprof.ShapeProfiler(str(tmp_path / "p.jsonl"))
    assert prof.start_forward_pass(label) is True
    torch.ones(2).neg()
    prof.end_forward_pass()
    with prof.forward_pass("decode"):
        torch.ones(3).neg()
    prof.close()
    recs = load(tmp_path / "p.jsonl")
    assert [r["phase"] for r in recs] == [recorded] * 2 + ["decode"] * 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "phase label" in err[0]


def test_native_pass_begin_takes_a_phase_as_str_or_none(tmp_path):
    """The Python side turns a bad label into a good one on ValueError
    (above): the native call must raise it, and TypeError for what is not
    a label, as PyArg_ParseTuple's "|z" did before it took fast calls."""
    prof = sgl_shapeprof.ShapeProfiler(str(tmp_path / "p.jsonl"))
    native = prof._native
    for args in [(), (None,), ("decode",)]:
        assert native.pass_begin(*args) is True
        native.pass_end()
    for args, error in [(("a\0b",), ValueError), (("\udc80",), ValueError), ((3,), TypeError),
                        (("a", "b"), TypeError)]:
        with pytest.raises(error):
            native.pass_begin(*args)
    prof.close()


def test_explicit_profiler_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="skip_warmup"):
        sgl_shapeprof.ShapeProfiler(tmp_path / "a.jsonl", skip_warmup=-1)
    with pytest.raises(TypeError, match="log_n_passes"):
        sgl_shapeprof.ShapeProfiler(tmp_path / "a.jsonl", log_n_passes="3")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        sgl_shapeprof.ShapeProfiler(tmp_path / "missing" / "a.jsonl")


OFF_CHECK = r'''
import os, sys, torch, sgl_shapeprof
from sgl_shapeprof import _C
p = sgl_shapeprof.from_env(rank=int(sys.argv[1]) if len(sys.argv) > 1 else None)
torch.randn(3).exp()
print(p is None, _C.fallback_installed(), _C.thread_enabled())
'''


def test_off_means_off_when_unset():
    r = run_python(OFF_CHECK)
    assert r.stdout.split() == ["True", "False", "False"], r.stderr


def test_off_means_off_on_other_rank(tmp_path):
    r = run_python(OFF_CHECK, {"SGLANG_PROFILE_SHAPES": "1", "SGLANG_PROFILE_SHAPES_RANK": "1",
                               "SGLANG_PROFILE_SHAPES_FILE": str(tmp_path / "x.jsonl")})
    assert r.stdout.split() == ["True", "False", "False"], r.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_key_only_inside_logged_passes(tmp_path):
    from sgl_shapeprof import _C
    prof = sgl_shapeprof.ShapeProfiler(tmp_path / "k.jsonl", skip_warmup=1, log_n_passes=1)
    states = []
    for _ in range(3):
        logged = prof.start_forward_pass()
        states.append((logged, _C.thread_enabled()))
        torch.randn(2).sin()
        prof.end_forward_pass()
        states.append(_C.thread_enabled())
    prof.close()
    assert states == [(False, False), False, (True, True), False, (False, False), False]
    assert {r["forward_pass"] for r in load(tmp_path / "k.jsonl")} == {2}


def test_close_is_idempotent_and_runs_at_exit(tmp_path):
    path = tmp_path / "x.jsonl"
    code = ("import torch, sgl_shapeprof\n"
            f"p = sgl_shapeprof.ShapeProfiler({str(path)!r})\n"
            "p.start_forward_pass(); torch.ones(2).neg()\n")  # no end, no close
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    s = json.load(open(tmp_path / "x_summary.json"))
    assert s["total_operations"] == 2 and s["ended_by"] == "close"
    p = sgl_shapeprof.ShapeProfiler(tmp_path / "y.jsonl")
    p.close()
    p.close()
    assert p.start_forward_pass() is False


def test_phase_filter_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES", "1")
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_FILE", str(tmp_path / "p.jsonl"))
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_PHASES", "prefill")
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_LOG_N_PASSES", "2")
    prof = sgl_shapeprof.from_env(rank=0)
    logged = []
    for phase in ["decode", "extend", "decode", "prefill", "extend"]:
        logged.append(prof.start_forward_pass(phase))
        prof.end_forward_pass()
    prof.close()
    assert logged == [False, True, False, True, False]  # the third match is past the limit
    s = json.load(open(prof.summary_path))
    assert s["phase_passes"] == {"extend": 1, "prefill": 1}  # 2 logged, then the limit
    assert s["forward_passes"] == 5


def test_two_profilers_never_share_a_file(tmp_path, capsys):
    """Two processes with the same rank name (pipeline/data parallel): the
    second gets a file of its own. flock is per open file, so two profilers in
    one process show the same thing."""
    path = tmp_path / "same.jsonl"
    first = sgl_shapeprof.ShapeProfiler(path)
    second = sgl_shapeprof.ShapeProfiler(path)
    assert second.path == str(tmp_path / f"same.pid{os.getpid()}.jsonl")
    assert "in use by another process" in capsys.readouterr().err
    for prof, size in ((first, 3), (second, 5)):
        with prof.forward_pass():
            torch.ones(size).neg()
        prof.close()
    assert [r["inputs"] for r in load(path) if r["operation"] == "aten.neg.default"] == [
        {"self": {"shape": [3], "dtype": "torch.float32"}}]
    assert len(load(second.path)) == 2
    third = sgl_shapeprof.ShapeProfiler(path)  # the first let go: the name is free again
    assert third.path == str(path)
    third.close()


def test_phases_argument_same_as_env(tmp_path):
    prof = sgl_shapeprof.ShapeProfiler(tmp_path / "ph.jsonl", phases=["prefill", "decode"])
    logged = []
    for phase in ["extend", "decode", "idle", None]:
        logged.append(prof.start_forward_pass(phase))
        prof.end_forward_pass()
    prof.close()
    assert logged == [True, True, False, False]


def test_links_at_our_paths_are_never_written_through(tmp_path, capsys, monkeypatch):
    """In a shared folder anyone may plant a symlink where we write."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "a.jsonl").symlink_to(victim)
    with pytest.raises(OSError, match="symbolic link"):
        sgl_shapeprof.ShapeProfiler(str(tmp_path / "a.jsonl"))
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES", "1")
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_FILE", str(tmp_path / "a.jsonl"))
    assert sgl_shapeprof.from_env() is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "symbolic link" in err[0] and "SGLANG_PROFILE_SHAPES_FILE" in err[0]
    # the summary and any temporary name beside it: replaced, never followed
    (tmp_path / "b_summary.json").symlink_to(victim)
    (tmp_path / "b_summary.json.tmp").symlink_to(victim)
    import torch
    prof = sgl_shapeprof.ShapeProfiler(str(tmp_path / "b.jsonl"))
    with prof.forward_pass():
        torch.ones(2).neg()
    prof.close()
    assert victim.read_text() == "precious\n"
    assert not (tmp_path / "b_summary.json").is_symlink()
    assert json.loads((tmp_path / "b_summary.json").read_text())["total_operations"] == 2


def test_a_phase_filter_that_matches_nothing_is_said_at_close(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES", "1")
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_FILE", str(tmp_path / "t.jsonl"))
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_PHASES", "decod")   # a typo
    prof = sgl_shapeprof.from_env()
    for phase in ("extend", "decode", "decode"):
        with prof.forward_pass(phase):
            torch.ones(2).neg()
    prof.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["sgl_shapeprof: SGLANG_PROFILE_SHAPES_PHASES='decod' matched none of the 3 passes "
                   f"(labels seen: 'decode', 'extend'); nothing was recorded in {tmp_path / 't.jsonl'}"]
    # a filter that matched something says nothing
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_PHASES", "decode")
    prof = sgl_shapeprof.from_env()
    with prof.forward_pass("decode"):
        torch.ones(2).neg()
    prof.close()
    assert capsys.readouterr().err == ""


def test_one_definition_of_the_variable_names():
    """The start-up hook's module cannot import config (it runs in every
    Python process): it must spell the switch as config does, neutral
    spelling first."""
    from helpers import hook_module
    from sgl_shapeprof.recording import config
    from sgl_shapeprof.recording.switch import loads_hook, switch_value
    hook = hook_module()
    assert hook.SWITCHES == (config.neutral_name(config.ENV_ENABLE), config.ENV_ENABLE)
    assert switch_value({config.ENV_ENABLE: "a", config.neutral_name(config.ENV_ENABLE): "b"}) == "b"
    for value in ("", "0", " 0 ", "1", " 1", "on_request", "true"):
        for name in hook.SWITCHES:
            assert hook.switched_on({name: value}) == loads_hook({name: value}), (name, value)
    assert hook.switched_on({hook.SWITCHES[0]: "0", hook.SWITCHES[1]: "1"}) is loads_hook(
        {hook.SWITCHES[0]: "0", hook.SWITCHES[1]: "1"})
    assert config.phase_filter("prefill,decode") == {"prefill", "extend", "decode"}
    assert config.phase_filter(["decode"]) == config.parse_phases("decode")
    assert config.phase_filter(" , ") is None


SGLANG_SPELLING = {"SGLANG_PROFILE_SHAPES": "1", "SGLANG_PROFILE_SHAPES_RANK": "0,2",
                   "SGLANG_PROFILE_SHAPES_FILE": "/tmp/x.jsonl", "SGLANG_PROFILE_SHAPES_SKIP_WARMUP": "3",
                   "SGLANG_PROFILE_SHAPES_LOG_N_PASSES": "5", "SGLANG_PROFILE_SHAPES_DEDUPE": "1",
                   "SGLANG_PROFILE_SHAPES_PHASES": "decode", "SGLANG_PROFILE_SHAPES_ARGS": "1"}


def test_neutral_names_read_as_sglangs():
    """SHAPEPROF_X is SGLANG_PROFILE_SHAPES_X, for every variable."""
    neutral = {"SHAPEPROF" + k[len("SGLANG_PROFILE_SHAPES"):]: v for k, v in SGLANG_SPELLING.items()}
    assert sorted(neutral)[:2] == ["SHAPEPROF", "SHAPEPROF_ARGS"]
    cfg = read_env(neutral)
    assert cfg == read_env(SGLANG_SPELLING)
    assert cfg.enabled and cfg.ranks == {0, 2} and cfg.skip_warmup == 3 and cfg.log_n_passes == 5
    assert cfg.dedupe is True and cfg.phases == {"decode"} and cfg.args is True
    half = {k: v for k, v in SGLANG_SPELLING.items() if "RANK" in k or "FILE" in k}
    half.update({k: v for k, v in neutral.items() if k not in ("SHAPEPROF_RANK", "SHAPEPROF_FILE")})
    assert read_env(half) == cfg                                   # mixed spellings
    assert read_env(dict(SGLANG_SPELLING, SHAPEPROF_FILE="")) == cfg   # an empty neutral one: not read
    assert read_env(dict(SGLANG_SPELLING, SHAPEPROF_FILE="/tmp/x.jsonl")) == cfg   # both, agreeing


@pytest.mark.parametrize("env,message", [
    ({"SHAPEPROF": "1", "SHAPEPROF_FILE": "a.jsonl", "SGLANG_PROFILE_SHAPES_FILE": "b.jsonl"},
     "SHAPEPROF_FILE='a.jsonl' and SGLANG_PROFILE_SHAPES_FILE='b.jsonl' disagree: set one of them"),
    ({"SHAPEPROF": "1", "SGLANG_PROFILE_SHAPES": "0"},
     "SHAPEPROF='1' and SGLANG_PROFILE_SHAPES='0' disagree: set one of them"),
    ({"SHAPEPROF": "yes"}, "SHAPEPROF='yes' must be 0, 1 or on_request"),
    ({"SHAPEPROF": "1", "SHAPEPROF_SKIP_WARMUP": "abc"}, "SHAPEPROF_SKIP_WARMUP='abc' is not an integer"),
    ({"SHAPEPROF": "1", "SHAPEPROF_RANK": "-1"}, "SHAPEPROF_RANK='-1' must not be negative"),
    ({"SHAPEPROF": "1", "SHAPEPROF_FILE": " "}, "SHAPEPROF_FILE=' ' is empty"),
    ({"SHAPEPROF": "1", "SHAPEPROF_PHASES": "a b"}, "SHAPEPROF_PHASES='a b': phase 'a b' must be letters"),
])
def test_neutral_names_in_messages(env, message):
    with pytest.raises(ConfigError) as e:
        read_env(env)
    assert str(e.value).startswith(message), str(e.value)


def test_neutral_switch_turns_from_env_on(tmp_path, monkeypatch, capsys):
    from sgl_shapeprof.recording import env as env_module
    from sgl_shapeprof.recording.switch import armed_on_request, loads_hook
    monkeypatch.setattr(env_module, "_env_profiler", None)
    monkeypatch.setenv("SHAPEPROF", "1")
    monkeypatch.setenv("SHAPEPROF_FILE", str(tmp_path / "n.jsonl"))
    assert loads_hook() and not armed_on_request()
    prof = sgl_shapeprof.from_env()
    assert prof is not None and prof.path == str(tmp_path / "n.jsonl")
    prof.close()
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_FILE", str(tmp_path / "other.jsonl"))
    assert sgl_shapeprof.from_env() is None
    assert capsys.readouterr().err.strip().endswith("disagree: set one of them; profiling is off")


def hand_copies_in_the_hook_module(path, names) -> list:
    """String literals of the start-up hook's module that spell one of
    names: the switch's names and the unarmed targets have their owners
    (recording/switch.py, the registry's seams), and the module is given
    them by its .pth line."""
    import ast
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    return [f"{os.path.basename(path)}:{n.lineno}: {n.value!r}" for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and n.value in names]


def test_the_hook_module_holds_no_copy_of_what_its_line_gives(tmp_path):
    from helpers import ROOT
    from sgl_shapeprof.integrations import install
    values = install.written_values()
    names = set(values["SWITCHES"]) | set(values["UNARMED_TARGETS"])
    module = os.path.join(ROOT, "sgl_shapeprof_autohook.py")
    assert hand_copies_in_the_hook_module(module, names) == []
    planted = tmp_path / "sgl_shapeprof_autohook.py"
    planted.write_text(open(module).read().replace("SWITCHES = ()", 'SWITCHES = ("SHAPEPROF",)'))
    assert hand_copies_in_the_hook_module(str(planted), names) == ["sgl_shapeprof_autohook.py:28: 'SHAPEPROF'"]


def test_a_childs_environment_is_built_in_one_place_with_records_and_runs_rules():
    """record keeps the user's other variables of ours, run drops them; both
    give each setting in its neutral spelling only."""
    from sgl_shapeprof.recording import config
    environ = {"PATH": "/bin", "SGLANG_PROFILE_SHAPES_FILE": "old", "SHAPEPROF_RANK": "1",
               "SGLANG_PROFILE_SHAPES_PHASES": "decode", "SHAPEPROF": "0"}
    settings = {config.ENV_ENABLE: "1", config.ENV_FILE: "new"}
    assert config.child_environ(settings, environ=environ) == {
        "PATH": "/bin", "SHAPEPROF_RANK": "1", "SGLANG_PROFILE_SHAPES_PHASES": "decode", "SHAPEPROF": "1",
        "SHAPEPROF_FILE": "new"}
    assert config.child_environ(settings, keep_others=False, environ=environ) == {
        "PATH": "/bin", "SHAPEPROF": "1", "SHAPEPROF_FILE": "new"}
