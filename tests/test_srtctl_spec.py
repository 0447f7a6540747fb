"""run --spec: srtctl's job files read as srtctl reads them. The oracle is
srtctl 0.3's own rules (NVIDIA/srt-slurm: `SrtConfig._validate_profiling`,
`ResourceConfig.is_disaggregated`, its profiling scripts' defaults and
checks), and the job files are shaped as its docs and recipes write them."""
import json
import os

import pytest
import yaml
from helpers import StubServer

from sgl_shapeprof.cli import main
from sgl_shapeprof.integrations.srtctl import SpecError, parse, read

# srtctl's docs/profiling.md example (disaggregated), with today's traffic: the benchmark section
DISAGG = """
name: "profiling-torch"
model: {path: "deepseek-r1", container: "latest", precision: "fp8"}
resources: {gpu_type: "gb200", prefill_nodes: 1, decode_nodes: 1, prefill_workers: 1, decode_workers: 1,
            gpus_per_node: 4}
profiling:
  type: "shapes"
  prefill: {start_step: 10, stop_step: 20}
  decode: {start_step: 5, stop_step: 30}
benchmark: {type: "sa-bench", isl: 1000, osl: 200, concurrencies: "64"}
"""

# srtctl's examples/enable-profiling.yaml (its first schema: the traffic in the profiling section)
OLD = """
name: "gb200-fp8-profiling"
model: {path: "/models/deepseek-r1", container: "/containers/sglang.sqsh", precision: "fp8"}
resources: {gpu_type: "gb200", prefill_nodes: 1, decode_nodes: 1, prefill_workers: 1, decode_workers: 1}
profiling:
  type: "torch"
  isl: 1024
  osl: 128
  concurrency: 1
  prefill: {start_step: 0, stop_step: 50}
  decode: {start_step: 0, stop_step: 50}
"""

AGG = """
resources: {gpu_type: "h200", agg_nodes: 1, agg_workers: 1}
profiling:
  type: shapes
  aggregated: {}
benchmark: {type: "sglang-bench", isl: 16, osl: 4, concurrencies: [8]}
"""


def load(text, **changes):
    doc = yaml.safe_load(text)
    for dotted, value in changes.items():
        *path, last = dotted.split("__")
        node = doc
        for key in path:
            node = node.setdefault(key, {})
        if value is KeyError:
            node.pop(last, None)
        else:
            node[last] = value
    return doc


def test_a_disaggregated_job_is_one_profile_per_role_with_its_window_and_the_benchmarks_traffic():
    job = parse(load(DISAGG))
    assert job.disaggregated and job.backend is None and job.model_path == "deepseek-r1"
    assert [(p.role, p.folder, p.start_step, p.stop_step, p.isl, p.osl, p.concurrency) for p in job.profiles] == [
        ("prefill", "prefill", 10, 20, 1000, 200, 64), ("decode", "decode", 5, 30, 1000, 200, 64)]


def test_srtctls_first_schema_gives_the_traffic_in_the_profiling_section():
    job = parse(load(OLD))
    assert [(p.role, p.start_step, p.stop_step, p.isl, p.osl, p.concurrency) for p in job.profiles] == [
        ("prefill", 0, 50, 1024, 128, 1), ("decode", 0, 50, 1024, 128, 1)]


def test_an_empty_block_takes_srtctls_window_0_to_50_and_aggregated_goes_to_agg():
    job = parse(load(AGG))
    (p,) = job.profiles
    assert not job.disaggregated and (p.role, p.folder, p.start_step, p.stop_step) == ("aggregated", "agg", 0, 50)
    assert (p.isl, p.osl, p.concurrency) == (16, 4, 8)


def test_a_roles_own_traffic_comes_before_the_sections():
    job = parse(load(DISAGG, profiling__decode={"start_step": 0, "stop_step": 4, "isl": 8, "osl": 2,
                                                "concurrency": 3}))
    assert [(p.isl, p.osl, p.concurrency) for p in job.profiles] == [(1000, 200, 64), (8, 2, 3)]


def test_a_concurrency_sweep_is_profiled_at_the_one_picked():
    doc = load(DISAGG, benchmark__concurrencies="1x2x4x8")
    with pytest.raises(SpecError, match=r"^benchmark.concurrencies 1x2x4x8 is a sweep: pick the one to profile "
                                        r"with --concurrency$"):
        parse(doc)
    assert {p.concurrency for p in parse(doc, concurrency=4).profiles} == {4}
    with pytest.raises(SpecError, match=r"--concurrency 3 is not one of benchmark.concurrencies \(1x2x4x8\)"):
        parse(doc, concurrency=3)


@pytest.mark.parametrize("changes,says", [
    # _validate_profiling
    ({"profiling__aggregated": {"start_step": 0}}, "profiling.aggregated: a disaggregated job"),
    ({"profiling__decode": KeyError}, "needs both profiling.prefill and profiling.decode"),
    ({"profiling__prefill": None}, "needs both profiling.prefill and profiling.decode"),
    ({"resources__decode_workers": 0}, "resources.decode_workers must be above 0"),
    ({"resources__prefill_workers": KeyError}, "resources.prefill_workers must be above 0"),
    # the profiling scripts: isl and osl, and a concurrency, must be set; the step range must be one
    ({"benchmark__isl": KeyError}, "benchmark.isl is missing"),
    ({"benchmark__concurrencies": KeyError}, "benchmark.concurrencies is missing"),
    ({"benchmark": {"type": "manual"}}, "no traffic: the spec gives no isl, osl and concurrency"),
    ({"profiling__prefill__stop_step": 10}, "profiling.prefill: stop_step 10 must be greater than start_step 10"),
    ({"profiling__decode__start_step": "five"}, "profiling.decode.start_step: 'five' is not an integer"),
    ({"benchmark__isl": 0}, "benchmark.isl: 0 must be at least 1"),
    ({"benchmark__concurrencies": "4xeight"}, "benchmark.concurrencies: '4xeight' is not a list of integers"),
    # the type: none is srtctl's default (nothing profiled); nsys-time has no steps
    ({"profiling__type": KeyError}, "profiling.type is none"),
    ({"profiling__type": "nsys-time"}, "profiling.type nsys-time captures by time"),
    ({"profiling__type": "perf"}, "profiling.type 'perf': one of shapes, torch, nsys"),
    ({"profiling": KeyError}, "has no profiling: section"),
    ({"resources": KeyError}, "has no resources: section"),
])
def test_a_job_srtctl_would_refuse_is_refused_in_one_line_naming_the_field(changes, says):
    with pytest.raises(SpecError) as e:
        parse(load(DISAGG, **changes))
    assert says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("changes,says", [
    ({"profiling__prefill": {"start_step": 0}}, "an aggregated job (no resources.prefill_nodes/decode_nodes) takes "
                                                "profiling.aggregated only"),
    ({"profiling__aggregated": KeyError}, "an aggregated job needs profiling.aggregated"),
    ({"resources__agg_workers": KeyError}, "resources.agg_workers must be above 0"),
])
def test_an_aggregated_job_takes_the_aggregated_block_only(changes, says):
    with pytest.raises(SpecError) as e:
        parse(load(AGG, **changes))
    assert says in str(e.value)


def test_a_file_that_is_not_yaml_or_not_there_is_one_line(tmp_path):
    bad = tmp_path / "job.yaml"
    bad.write_text("profiling:\n  type: shapes\n   prefill: [\n")
    with pytest.raises(SpecError, match=r"^.*job.yaml is not YAML \(line \d+\): "):
        read(str(bad))
    with pytest.raises(SpecError, match=r"^cannot read .*nothing.yaml: No such file or directory$"):
        read(str(tmp_path / "nothing.yaml"))


def _model(tmp_path):
    """A model folder whose config gives the vocabulary (what --isl draws from)."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 97}))
    return str(folder)


def test_run_spec_refuses_what_the_job_file_gives_and_a_missing_model(tmp_path, capsys):
    spec = tmp_path / "job.yaml"
    spec.write_text(DISAGG)
    assert main(["run", "--spec", str(spec), "--isl", "4"]) == 2
    assert capsys.readouterr().err == ("sgl-shapeprof run: --isl: the job file gives it (--spec); --concurrency "
                                       "picks one of its concurrencies\n")
    assert main(["run", "--spec", str(spec), "-o", str(tmp_path / "o")]) == 2
    assert "--model-path is required: " in capsys.readouterr().err
    spec.write_text(DISAGG + "backend: {type: sglang}\n")
    assert main(["run", "--spec", str(spec), "--server", "vllm", "--model-path", "m"]) == 2
    assert capsys.readouterr().err.endswith("--server vllm, but " + str(spec) + "'s backend.type is sglang\n")
    spec.write_text(DISAGG + "backend: {type: trtllm}\n")
    assert main(["run", "--spec", str(spec), "--model-path", "m"]) == 2
    assert capsys.readouterr().err.endswith("backend.type is trtllm: run drives sglang or vllm\n")


def test_run_spec_url_arms_each_roles_workers_and_sends_one_workload_through_the_front(tmp_path, capsys):
    """A disaggregated deployment: the prefill and decode workers each asked
    for shapes over their own window into their role's folder, the traffic
    sent once to the front (the router), every window closed."""
    spec = tmp_path / "job.yaml"
    spec.write_text(DISAGG.replace('isl: 1000, osl: 200, concurrencies: "64"', 'isl: 6, osl: 3, concurrencies: "2"'))
    prefill, decode, front = StubServer(), StubServer(), StubServer()
    out = tmp_path / "profiles"
    try:
        code = main(["run", "--spec", str(spec), "--url", front.url, "--worker-url", f"prefill={prefill.url}",
                     "--worker-url", f"decode={decode.url}", "--model-path", _model(tmp_path),
                     "--num-prompts", "5", "-o", str(out)])
    finally:
        for s in (prefill, decode, front):
            s.close()
    assert code == 0, capsys.readouterr().err
    assert prefill.seen == ["/start_profile", "/stop_profile"] and decode.seen == ["/start_profile", "/stop_profile"]
    assert prefill.bodies[0] == {"activities": ["SHAPES"], "output_dir": str(out / "prefill"), "start_step": 10,
                                 "num_steps": 10}
    assert decode.bodies[0] == {"activities": ["SHAPES"], "output_dir": str(out / "decode"), "start_step": 5,
                                "num_steps": 25}
    assert front.seen == ["/generate"] * 5
    for body in front.bodies:
        assert len(body["input_ids"]) == 6 and all(0 <= t < 97 for t in body["input_ids"])
        assert body["sampling_params"]["max_new_tokens"] == 3 and body["sampling_params"]["ignore_eos"]
    assert os.path.isdir(out / "prefill") and os.path.isdir(out / "decode")


def test_run_spec_url_needs_every_roles_workers(tmp_path, capsys):
    spec = tmp_path / "job.yaml"
    spec.write_text(DISAGG)
    assert main(["run", "--spec", str(spec), "--url", "http://127.0.0.1:9", "--worker-url", "prefill=http://p:1",
                 "--model-path", "m"]) == 2
    assert capsys.readouterr().err.startswith("sgl-shapeprof run: --worker-url decode=URL is missing")
    assert main(["run", "--spec", str(spec), "--url", "http://127.0.0.1:9", "--worker-url", "agg=http://p:1",
                 "--model-path", "m"]) == 2
    assert "profiles prefill and decode, not aggregated" in capsys.readouterr().err
