"""A records file is untrusted data (issue 40): files travel with bug
reports, and the person who runs `repro --run` or `replay` on one is a
maintainer. No command runs what a record says, writes outside its own
outputs because of it, or writes a record's text into a script as code.

The oracle is the file system: a record that tries to reach it leaves
nothing behind; and the written script's syntax tree, in which record text
may stand only as string constants of plain assignments."""
import ast
import json
import os

import pytest
import torch

from sgl_shapeprof import ShapeProfiler
from sgl_shapeprof.cli import main as cli

PAYLOAD = "\n__import__('pathlib').Path('PWNED').touch()\n"


@pytest.fixture
def failing_record(tmp_path):
    """A true record of a failing call, with its arguments (what repro needs)."""
    path = tmp_path / "true.jsonl"
    a, b = torch.randn(3, 4), torch.randn(5, 6)
    prof = ShapeProfiler(path, args=True)
    with prof.forward_pass():
        with pytest.raises(RuntimeError):
            torch.mm(a, b)
    prof.close()
    (rec,) = [json.loads(line) for line in open(path)]
    assert rec["operation"] == "aten.mm.default" and rec["error"]["error_type"] == "RuntimeError"
    return rec


def write(tmp_path, rec, name="hostile.jsonl"):
    path = tmp_path / name
    path.write_text(json.dumps(rec) + "\n")
    return str(path)


def repro(tmp_path, path, capsys, *more):
    out = tmp_path / "out"
    code = cli(["repro", path, "-o", str(out), "--run", *more])
    return code, capsys.readouterr(), out


def test_a_hostile_error_message_stays_a_string(tmp_path, failing_record, capsys, monkeypatch):
    """A message that would close the docstring and run code, were it
    written as text: the script holds it as a literal, and running the
    script creates nothing."""
    monkeypatch.chdir(tmp_path)
    rec = dict(failing_record, error={"error_type": "RuntimeError",
                                      "error_message": '"""' + PAYLOAD + '"""#' + "\r# \u2028 \x0c end"})
    code, said, out = repro(tmp_path, write(tmp_path, rec), capsys)
    (script,) = os.listdir(out)
    text = (out / script).read_text()
    assert not (out / "PWNED").exists() and not (tmp_path / "PWNED").exists()
    tree = ast.parse(text)
    doc = ast.get_docstring(tree)
    assert "PWNED" not in doc and "pathlib" not in doc
    # every string holding the payload is a constant in a plain assignment
    holders = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
               and "PWNED" in n.value]
    assigned = {id(c) for n in ast.walk(tree) if isinstance(n, ast.Assign)
                for c in ast.walk(n.value) if isinstance(c, ast.Constant)}
    assert holders and all(id(h) in assigned for h in holders)
    assert "raised something else" in said.out  # it ran, and compared (the message was changed)


@pytest.mark.parametrize("field, value, names", [
    ("error", {"error_type": 'RuntimeError"""' + PAYLOAD + '"""#', "error_message": "x"}, "error_type"),
    ("operation", "aten.mm.default\nimport os", "operation"),
    ("operation", "aten.mm.default(); __import__('os')", "operation"),
    ("call_id", "1); __import__('os').system('touch PWNED'", "call_id"),
    ("call_id", True, "call_id"),
    ("forward_pass", "3 */ import os", "forward_pass"),
], ids=["error_type", "operation-newline", "operation-call", "call_id-code", "call_id-bool", "forward_pass"])
def test_a_record_that_fails_validation_is_refused_in_one_line(tmp_path, failing_record, capsys, monkeypatch,
                                                               field, value, names):
    monkeypatch.chdir(tmp_path)
    rec = dict(failing_record, **{field: value})
    path = write(tmp_path, rec)
    code, said, out = repro(tmp_path, path, capsys, "--call", str(failing_record["call_id"]))
    if field == "call_id":  # the --call ID no longer names it: ask for all failures instead
        code, said, out = repro(tmp_path, path, capsys)
    lines = [ln for ln in said.out.splitlines() if "no script" in ln]
    assert code == 1 and len(lines) == 1, said
    assert f"not a valid record: {names}" in lines[0], lines[0]
    assert "\n" not in lines[0] and "import os" not in lines[0].split(": ", 1)[0]
    assert not os.path.exists(out) or not [f for f in os.listdir(out) if f.endswith(".py")]
    assert not (tmp_path / "PWNED").exists()


def test_replay_refuses_a_call_that_reaches_a_file(tmp_path, capsys, monkeypatch):
    """aten.from_file with shared=True would create the file it names."""
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "Y"
    rec = {"call_id": 1, "forward_pass": 1, "operation": "aten.from_file.default", "inputs": {},
           "args": {"filename": str(target), "shared": True, "size": 16}, "outputs": {"shape": [16],
                                                                                      "dtype": "torch.float32"}}
    path = write(tmp_path, rec)
    cli(["replay", path])
    out = capsys.readouterr().out
    assert not target.exists()
    assert "aten.from_file.default" in out and "reaches outside memory (filename)" in out, out
    code, said, outdir = repro(tmp_path, path, capsys, "--call", "1")
    assert not target.exists()
    assert "reaches outside memory (filename)" in said.out, said.out


@pytest.mark.parametrize("content", [b"[" * 65536, b'{"action": "start", "passes": 1e999}',
                                     b'{"action": "start", "phases": {"a": [1]}}', b"\xff\xfe\x00",
                                     b'{"action": "start", "passes": "many"}', b'{"id": {"x": 1}, "action": 7}'],
                         ids=["deep", "huge", "phases-object", "not-utf8", "not-a-number", "odd-id"])
def test_no_request_file_raises_into_the_model(tmp_path, monkeypatch, capsys, content):
    """What the control folder holds is read at a pass's start, in the
    model's thread: any content gets one reply line, and the pass goes on
    (65,536 '[' once killed a real SGLang server: RecursionError)."""
    from sgl_shapeprof.recording.on_request import OnRequestProfiler
    control = tmp_path / "control"
    control.mkdir(mode=0o700)
    monkeypatch.setenv("SHAPEPROF_CONTROL_DIR", str(control))
    prof = OnRequestProfiler(output_dir=str(tmp_path))
    (control / f"{os.getpid()}.request").write_bytes(content)
    x = torch.ones(2)
    with prof.forward_pass("decode"):
        y = x + 1
    assert torch.equal(y, torch.full((2,), 2.0))
    replies = [f for f in os.listdir(control) if ".reply." in f]
    assert len(replies) == 1, os.listdir(control)
    reply = json.load(open(control / replies[0]))
    assert reply["ok"] is False and "\n" not in reply["message"], reply
    with prof.forward_pass("decode"):  # and the next pass too
        x + 1
    prof.close()


@pytest.mark.parametrize("value", ["../../esc", "a/b", "..", "x" * 101, "é" * 51, "nul\0", "tab\t", "back\\slash"])
def test_a_request_name_is_a_name_not_a_path(value):
    from sgl_shapeprof.recording.requests import RequestError, request_name
    with pytest.raises(RequestError) as e:
        request_name("profile_id", value)
    assert "is not a name" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("value", ["1795435378.7868838", "run1", "x" * 100, "é" * 50])
def test_sglangs_own_ids_are_names(value):
    from sgl_shapeprof.recording.requests import request_name
    assert request_name("profile_id", value) == value


@pytest.mark.parametrize("value", [-1, 1.5, "3", True, [1]])
def test_a_request_count_is_a_whole_number(value):
    from sgl_shapeprof.recording.requests import RequestError, request_count
    with pytest.raises(RequestError):
        request_count("num_steps", value)
    assert request_count("num_steps", None) == 0 and request_count("num_steps", 7) == 7


# A records file's lines no parser takes (issue 56): json raises
# RecursionError, not ValueError, past the interpreter's recursion limit, and
# a value nested a little less parses but breaks whatever walks it. Each is
# an unreadable line in every reader, never a traceback.
def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _profiler_line(field: str, value: str) -> bytes:
    """A line as the profiler lays it out (the scan's fast path takes it)."""
    inputs = value if field == "inputs" else "{}"
    args = f', "args": {{"x": {value}}}' if field == "args" else ""
    return (f'{{"call_id": 9999, "forward_pass": 1, "operation": "aten.mm.default", '
            f'"inputs": {{"self": {inputs}}}{args}, "outputs": null}}').encode()


HOSTILE_LINES = {
    "flood": b"[" * 100_000,                                # no JSON at all, past any parser's depth
    "deep-record": _profiler_line("inputs", _nested(100_000)),  # JSON, past json's depth
    "deep-inputs": _profiler_line("inputs", _nested(500)),      # parses; walking it did not
    "deep-args": _profiler_line("args", _nested(500)),
}

COMMANDS = {
    "analyze": lambda f, d: ["analyze", f, "--show-shapes"],
    "analyze-json": lambda f, d: ["analyze", f, "--json"],
    "gemm": lambda f, d: ["gemm", f],
    "cost": lambda f, d: ["cost", f, "--gpu", "H100"],
    "diff": lambda f, d: ["diff", f, f],
    "tune": lambda f, d: ["tune", f, "--device", "H100"],
    "replay": lambda f, d: ["replay", f, "--warmup", "1", "--iterations", "2"],
    "repro": lambda f, d: ["repro", f, "-o", str(d / "repro")],
    "report": lambda f, d: ["report", f, "-o", str(d / "report.html")],
    "trace": lambda f, d: ["trace", f, "-o", str(d / "trace.json")],
}


@pytest.fixture(scope="module")
def true_records(tmp_path_factory):
    """A true recording with arguments: a GEMM, elementwise calls, one call that raised."""
    d = tmp_path_factory.mktemp("true")
    path = d / "shapes.jsonl"
    prof = ShapeProfiler(path, args=True, time=True)  # timed: `trace` reads it too
    with prof.forward_pass("decode"):
        a, b = torch.randn(8, 16), torch.randn(16, 4)
        (a @ b).relu().sum()
        with pytest.raises(RuntimeError):
            torch.mm(a, a)
    prof.close()
    lines = path.read_bytes().splitlines(keepends=True)
    assert len(lines) >= 4
    return lines, (d / "shapes_summary.json").read_bytes()


def _command(tmp_path, capsys, name, path):
    """(exit status, stdout + stderr) of one command, in this process: an
    exception out of main() fails the test with its traceback."""
    out = tmp_path / f"out-{name}"
    out.mkdir(parents=True)
    code = cli(COMMANDS[name](str(path), out))
    said = capsys.readouterr()
    return code, said.out, said.err


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("where", ["middle", "last"])
@pytest.mark.parametrize("hostile", HOSTILE_LINES)
def test_a_line_no_parser_takes_is_an_unreadable_line_in_every_reader(tmp_path, capsys, true_records, command,
                                                                      where, hostile):
    lines, summary = true_records
    clean = tmp_path / "clean" / "shapes.jsonl"
    clean.parent.mkdir()
    clean.write_bytes(b"".join(lines))
    (clean.parent / "shapes_summary.json").write_bytes(summary)
    bad_line = HOSTILE_LINES[hostile] + b"\n"
    at = len(lines) - 1 if where == "middle" else len(lines)
    bad = tmp_path / "bad" / "shapes.jsonl"
    bad.parent.mkdir()
    bad.write_bytes(b"".join(lines[:at]) + bad_line + b"".join(lines[at:]))
    (bad.parent / "shapes_summary.json").write_bytes(summary)

    code_clean, _, _ = _command(tmp_path / "clean", capsys, command, clean)
    code, out, err = _command(tmp_path / "bad", capsys, command, bad)
    said = out + err
    assert code == code_clean, said
    assert "Traceback" not in said and "RecursionError" not in said
    if where == "middle":
        assert f"1 unreadable line (first: line {at + 1})" in said, said
    else:
        assert "the last line was cut" in said, said
    if command == "analyze-json":  # the readable records counted as in the clean file
        files = json.loads(out)["files"]
        assert files[0]["records"] == len(lines)
        assert files[0]["unreadable_lines"] == (where == "middle")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_summary_nested_past_any_parser_is_unreadable_not_a_crash(tmp_path, capsys, true_records, command):
    lines, summary = true_records
    path = tmp_path / "shapes.jsonl"
    path.write_bytes(b"".join(lines))
    (tmp_path / "shapes_summary.json").write_bytes(summary)
    code_clean, _, _ = _command(tmp_path / "clean", capsys, command, path)
    (tmp_path / "shapes_summary.json").write_bytes(b"[" * 100_000)
    code, out, err = _command(tmp_path, capsys, command, path)
    said = out + err
    assert "Traceback" not in said and "RecursionError" not in said
    if command == "trace":  # the summary holds its clock's origin: refused, in one line saying so
        assert code == 2 and err.count("\n") == 1 and "summary" in err and "unreadable" in err, said
        return
    assert code == code_clean, said
    if command == "analyze":
        assert "unreadable" in said and "nested deeper than" in said, said


@pytest.mark.parametrize("command", COMMANDS)
def test_a_first_line_no_parser_takes_is_refused_in_one_line(tmp_path, capsys, command):
    path = tmp_path / "shapes.jsonl"
    path.write_bytes(b"[" * 100_000 + b"\n")
    code = cli(COMMANDS[command](str(path), tmp_path))
    said = capsys.readouterr()
    assert code == 2 and said.out == "", said
    assert said.err.count("\n") == 1 and "is not a records file" in said.err, said.err


@pytest.mark.parametrize("key", ["\x1b]0;owned\x07Fake", "Fake\nnote: all good", 7, ["Fake"], "F" * 65])
def test_a_summarys_dispatch_key_is_said_only_when_it_is_a_key_name(tmp_path, capsys, key):
    """analyze prints the route a file was recorded by from its summary: a
    value that is not an identifier (terminal escapes, lines of its own, not
    a string) is neither printed nor given in --json."""
    prof = ShapeProfiler(tmp_path / "s.jsonl")
    with prof.forward_pass():
        torch.ones(3).add(1)
    prof.close()
    summary = json.loads((tmp_path / "s_summary.json").read_text())
    summary["dispatch_key"] = key
    (tmp_path / "s_summary.json").write_text(json.dumps(summary))
    assert cli(["analyze", str(tmp_path / "s.jsonl")]) == 0
    said = capsys.readouterr()
    assert "recorded through" not in said.out and "owned" not in said.out and "all good" not in said.out
    assert cli(["analyze", str(tmp_path / "s.jsonl"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["files"][0]["dispatch_key"] is None


# Tensor shapes that are not a list of whole numbers (a corrupted or forged
# file): every reader read past them, never a traceback. The tensor whose
# shape cannot be read is not read as a tensor (records/values.readable).
HOSTILE_SHAPES = ['[2, null]', '["x", 3]', '[-1, 4]', '{"a": 1}', '[1e400, 2]', '[true, 2]', '"8x8"',
                  '[99999999999999999999999, 4]']


@pytest.mark.parametrize("command", COMMANDS)
def test_a_tensor_shape_that_is_not_whole_numbers_is_read_past_in_every_reader(tmp_path, capsys, true_records,
                                                                               command):
    lines, summary = true_records
    clean = tmp_path / "clean" / "shapes.jsonl"
    clean.parent.mkdir()
    clean.write_bytes(b"".join(lines))
    (clean.parent / "shapes_summary.json").write_bytes(summary)
    bad_lines = [(f'{{"call_id": {9000 + i}, "forward_pass": 1, "operation": "aten.mm.default", "inputs": '
                  f'{{"self": {{"shape": {s}, "dtype": "torch.float32"}}, "mat2": {{"shape": [16, 4], '
                  f'"dtype": "torch.float32"}}}}, "outputs": {{"shape": {s}, "dtype": "torch.float32"}}}}\n').encode()
                 for i, s in enumerate(HOSTILE_SHAPES)]
    bad = tmp_path / "bad" / "shapes.jsonl"
    bad.parent.mkdir()
    bad.write_bytes(lines[0] + b"".join(bad_lines) + b"".join(lines[1:]))
    (bad.parent / "shapes_summary.json").write_bytes(summary)
    code_clean, _, _ = _command(tmp_path / "clean", capsys, command, clean)
    code, out, err = _command(tmp_path / "bad", capsys, command, bad)
    assert code == code_clean, out + err
    assert "Traceback" not in out + err
    if command == "analyze-json":  # the calls are counted; no tensor of theirs is read from a bad shape
        mm = next(o for o in json.loads(out)["operations"] if o["operation"] == "aten.mm.default")
        assert mm["calls"] == 1 + len(HOSTILE_SHAPES) + 1  # the true mm, the hostile ones, the true one that raised
        unread = [s for s in mm["signatures"] if isinstance(s.get("outputs"), dict) and "shape" not in s["outputs"]]
        # the hostile calls kept and counted, their shapes not read: one signature of unreadable shapes
        assert [s["count"] for s in unread] == [len(HOSTILE_SHAPES)]
