"""srtctl's job file (NVIDIA/srt-slurm, the SLURM launcher of large SGLang
deployments), read for `sgl-shapeprof run --spec JOB.yaml`: its `profiling:`
section gives one step window per role, and the traffic to profile.

What is read, as srtctl 0.3's schema (`srtctl.core.schema`) and scripts
have it:

- `profiling.type`: `shapes` is this tool's (the convention docs/traffic.md
  states); srtctl's step-window types `torch` and `nsys` are read the same
  way (shapes are recorded instead). `none` (srtctl's default) profiles
  nothing and `nsys-time` has no step window: both refused.
- `resources`: prefill_nodes or decode_nodes set means disaggregated
  (srtctl's `is_disaggregated`). Disaggregated: `profiling.prefill` and
  `profiling.decode`, both, and no `aggregated`; prefill_workers and
  decode_workers above 0. Aggregated: `profiling.aggregated` only;
  agg_workers above 0 (`SrtConfig._validate_profiling`).
- a role's window: `start_step` (default 0) and `stop_step` (default 50),
  as srtctl's profiling script defaults them; stop must exceed start.
- the traffic, the first place that gives it: the role's block (`isl`,
  `osl`, `concurrency`), the profiling section (srtctl's first schema:
  `profiling.isl/osl/concurrency`, all three required), the benchmark
  section (today's: `benchmark.isl/osl/concurrencies`, concurrencies a list
  or "1x2x4"). A concurrency sweep is srtctl's benchmark, not one profile:
  one of its values is picked with --concurrency.

srtctl's output layout is kept: a folder per role, `prefill/`, `decode/`,
`agg/` (its PROFILE_AGG_OUTPUT_DIR).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, List, Optional

from ..records.worker import DECODE_ROLE, PREFILL_ROLE

# srtctl's profiling script's defaults (PROFILE_*_START_STEP / _STOP_STEP)
DEFAULT_START_STEP = 0
DEFAULT_STOP_STEP = 50
# the number of requests srtctl's profiling script sends (bench_serving --num-prompts)
DEFAULT_NUM_PROMPTS = 128
# profiling.type values with a step window: ours, and srtctl's own
STEP_TYPES = ("shapes", "torch", "nsys")
# srtctl's backend.type when a job file gives none (its schema's default)
DEFAULT_BACKEND = "sglang"
# a role's block in the profiling section -> its folder (srtctl's layout)
FOLDERS = {PREFILL_ROLE: "prefill", DECODE_ROLE: "decode", "aggregated": "agg"}


class SpecError(ValueError):
    """A job file srtctl would refuse, or one this command cannot run: the
    message is one line that names the field."""


@dataclass(frozen=True)
class Profile:
    """One role's profile: its window of forward passes [start_step,
    stop_step) and the traffic sent."""
    role: str  # prefill, decode, aggregated (the profiling section's block)
    folder: str  # srtctl's: prefill, decode, agg
    start_step: int
    stop_step: int
    isl: int
    osl: int
    concurrency: int


@dataclass(frozen=True)
class JobSpec:
    path: str
    disaggregated: bool
    backend: Optional[str]  # backend.type (unset: srtctl's default, DEFAULT_BACKEND), vllm, trtllm
    model_path: Optional[str]  # model.path: a folder, or an alias srtctl resolves itself
    profiles: List[Profile]


def _integer(value: Any, where: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{where}: {value!r} is not an integer")
    if value < least:
        raise SpecError(f"{where}: {value} must be at least {least}")
    return value


def _section(doc: dict, key: str, where: str) -> dict:
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SpecError(f"{where}{key}: must be a mapping, not {type(value).__name__}")
    return value


def _concurrencies(value: Any, where: str) -> List[int]:
    """srtctl's BenchmarkConfig.get_concurrency_list: "1x2x4" or a list."""
    if isinstance(value, str):
        try:
            return [_integer(int(x), where, 1) for x in value.split("x")]
        except ValueError:
            raise SpecError(f"{where}: {value!r} is not a list of integers like '4x8x16'") from None
    if isinstance(value, (list, tuple)):
        return [_integer(x, where, 1) for x in value]
    return [_integer(value, where, 1)]


def _traffic(block: dict, role: str, profiling: dict, benchmark: dict, concurrency: Optional[int]) -> dict:
    """isl, osl, concurrency: from the first place that gives any of them."""
    if any(k in block for k in ("isl", "osl", "concurrency")):
        source, where, conc_key = block, f"profiling.{role}.", "concurrency"
    elif any(k in profiling for k in ("isl", "osl", "concurrency")):
        source, where, conc_key = profiling, "profiling.", "concurrency"
    elif any(k in benchmark for k in ("isl", "osl", "concurrencies")):
        source, where, conc_key = benchmark, "benchmark.", "concurrencies"
    else:
        raise SpecError("no traffic: the spec gives no isl, osl and concurrency (profiling.isl/osl/concurrency, "
                        f"or benchmark.isl/osl/concurrencies; benchmark.type is {benchmark.get('type', 'unset')!r})")
    out = {}
    for key in ("isl", "osl", conc_key):
        if source.get(key) is None:
            raise SpecError(f"{where}{key} is missing (srtctl requires it with {where.rstrip('.')})")
    out["isl"] = _integer(source["isl"], where + "isl", 1)
    out["osl"] = _integer(source["osl"], where + "osl", 1)
    levels = _concurrencies(source[conc_key], where + conc_key)
    if concurrency is not None:
        if concurrency not in levels:
            raise SpecError(f"--concurrency {concurrency} is not {'one of ' if len(levels) > 1 else ''}"
                            f"{where}{conc_key} ({'x'.join(map(str, levels))})")
        out["concurrency"] = concurrency
    elif len(levels) > 1:
        raise SpecError(f"{where}{conc_key} {'x'.join(map(str, levels))} is a sweep: pick the one to profile "
                        "with --concurrency")
    else:
        out["concurrency"] = levels[0]
    return out


def parse(doc: Any, path: str = "JOB.yaml", concurrency: Optional[int] = None) -> JobSpec:
    """The profiles a job file asks for, checked as srtctl checks them."""
    if not isinstance(doc, dict):
        raise SpecError(f"{path}: a job file is a mapping (name:, model:, resources:, profiling: ...)")
    profiling = _section(doc, "profiling", "")
    if "profiling" not in doc:
        raise SpecError(f"{path} has no profiling: section (srtctl's; docs/traffic.md shows one)")
    kind = profiling.get("type", "none")
    if kind == "none":
        raise SpecError("profiling.type is none (srtctl's default: nothing profiled); give type: shapes")
    if kind == "nsys-time":
        raise SpecError("profiling.type nsys-time captures by time (delay_secs), not by steps: give type: shapes "
                        "with a start_step and stop_step per role")
    if kind not in STEP_TYPES:
        raise SpecError(f"profiling.type {kind!r}: one of {', '.join(STEP_TYPES)}")
    resources = _section(doc, "resources", "")
    if not resources:
        raise SpecError(f"{path} has no resources: section (srtctl requires one: it says whether prefill and "
                        "decode run apart)")
    disaggregated = resources.get("prefill_nodes") is not None or resources.get("decode_nodes") is not None
    blocks = {role: profiling.get(role) for role in FOLDERS}
    for role, block in blocks.items():
        if block is not None and not isinstance(block, dict):
            raise SpecError(f"profiling.{role}: must be a mapping (start_step:, stop_step:)")
    if disaggregated:
        if blocks["aggregated"] is not None:
            raise SpecError("profiling.aggregated: a disaggregated job (resources.prefill_nodes/decode_nodes) "
                            "takes profiling.prefill and profiling.decode, not aggregated")
        if blocks[PREFILL_ROLE] is None or blocks[DECODE_ROLE] is None:
            raise SpecError("a disaggregated job (resources.prefill_nodes/decode_nodes) needs both "
                            "profiling.prefill and profiling.decode")
        for key in ("prefill_workers", "decode_workers"):
            if _integer(resources.get(key) or 0, f"resources.{key}", 0) <= 0:
                raise SpecError(f"resources.{key} must be above 0 in a disaggregated job")
        roles = [PREFILL_ROLE, DECODE_ROLE]
    else:
        if blocks[PREFILL_ROLE] is not None or blocks[DECODE_ROLE] is not None:
            raise SpecError("profiling.prefill/decode: an aggregated job (no resources.prefill_nodes/decode_nodes) "
                            "takes profiling.aggregated only")
        if blocks["aggregated"] is None:
            raise SpecError("an aggregated job needs profiling.aggregated (start_step:, stop_step:)")
        if _integer(resources.get("agg_workers") or 0, "resources.agg_workers", 0) <= 0:
            raise SpecError("resources.agg_workers must be above 0 in an aggregated job")
        roles = ["aggregated"]
    benchmark = _section(doc, "benchmark", "")
    profiles = []
    for role in roles:
        block = blocks[role]
        start = block.get("start_step")
        stop = block.get("stop_step")
        start = DEFAULT_START_STEP if start is None else _integer(start, f"profiling.{role}.start_step", 0)
        stop = DEFAULT_STOP_STEP if stop is None else _integer(stop, f"profiling.{role}.stop_step", 1)
        if stop <= start:
            raise SpecError(f"profiling.{role}: stop_step {stop} must be greater than start_step {start}")
        profiles.append(Profile(role, FOLDERS[role], start, stop,
                                **_traffic(block, role, profiling, benchmark, concurrency)))
    backend = _section(doc, "backend", "").get("type")
    model = _section(doc, "model", "").get("path")
    return JobSpec(path, disaggregated, None if backend is None else str(backend),
                   model if isinstance(model, str) else None, profiles)


def read(path: str, concurrency: Optional[int] = None) -> JobSpec:
    """parse() of the YAML file at path."""
    try:
        import yaml
    except ImportError:
        raise SpecError("reading a job file needs PyYAML: pip install pyyaml") from None
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        raise SpecError(f"cannot read {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        raise SpecError(f"{path} is not YAML{at}: {getattr(e, 'problem', None) or e}") from None
    return parse(doc, path, concurrency)


def prefill_share(profile: Profile) -> Profile:
    """A prefill worker's share of a request run on one aggregated engine:
    its prompt and the first token (a disaggregated prefill worker hands
    the rest to a decode worker), so no decode pass enters its window."""
    return replace(profile, osl=1)


def backend(job: JobSpec) -> str:
    """The backend srtctl runs the job on: its backend.type, else srtctl's
    default (a server's seam says which of ours it is: srtctl_backend)."""
    return job.backend or DEFAULT_BACKEND
