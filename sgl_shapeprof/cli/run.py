"""`sgl-shapeprof run`: one command per server -- start its offline engine with
profiling on (every worker: TP x PP x DP), send the workload (the prompts, or
requests of exactly --isl random tokens, --osl tokens each, at most
--concurrency at once), record the window of passes asked (--start-step,
--stop-step), shut it down, analyze every worker's file together. Or drive
a running server (--url), or run the profiles a srtctl job file asks for
(--spec), one per role."""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
from typing import Optional

from ..integrations import srtctl
from ..integrations.registry import seam, servers, srtctl_backends
from ..records.reader import SUMMARY_SUFFIX
from . import analyze
from .common import fail

# the records files run asks for: shapes.jsonl, each worker's named from it
# (shapes_tp0.jsonl, ...; recording/selection.py), each summary beside it
RECORDS_STEM, RECORDS_EXT = "shapes", ".jsonl"

# without --spec: the requests sent (without --concurrency), the tokens each generates
PROMPTS = 3
MAX_TOKENS = 50


def prompts_in_flight(concurrency: int, osl: int, start: Optional[int], stop: Optional[int]) -> int:
    """The requests that keep `concurrency` of them in flight through the
    window: up to pass `stop`, or without one, through one request's life
    past the warm-up (start + osl).

    Every request is given to the engine at once, and it runs `concurrency`
    of them, refilling a slot from the queue as its request finishes. A
    request holds its slot for at least osl passes: its prefill pass makes
    its first token, each decode pass one more. So k requests through one
    slot keep it busy through pass k * osl at least, and ceil(last / osl)
    per slot keep every slot busy through pass `last`. What breaks the
    lockstep only lengthens a request's stay, never shortens it: a wave's
    requests reaching the scheduler over a few passes, a prefill chunked
    over several, another slot's prefill pass that decodes nothing else;
    so no wave is added for safety (the engine runs every request to its
    end: one more wave is osl passes more after the window). With --dp
    each replica runs concurrency/dp slots and takes every dp-th request
    (SGLang's round robin), so the count is the same in all. Not covered:
    a pass that makes several tokens of a request (speculative decoding),
    which needs more (--num-prompts).
    """
    last = stop if stop is not None else (start or 0) + osl
    return concurrency * -(-last // osl)


def _too_few(given: int, concurrency: int, osl: int, start: Optional[int], stop: Optional[int],
             role: str = "") -> None:
    """One line when --num-prompts cannot keep --concurrency in flight
    through the window (a note: a run may mean to record the drain)."""
    need = prompts_in_flight(concurrency, osl, start, stop)
    if given < need:
        last = stop if stop is not None else (start or 0) + osl
        print(f"sgl-shapeprof run: {role}--num-prompts {given} is too few to keep {concurrency} requests in flight "
              f"through pass {last} ({need} would: {concurrency} for every {osl} passes, a request's --osl); "
              f"the window's last passes run fewer", file=sys.stderr)


def add_parser(sub: "argparse._SubParsersAction") -> None:
    r = sub.add_parser("run", help="run a server's engine on a few prompts with profiling on, then analyze "
                                   "every rank's file")
    seams = [seam(n) for n in servers()]
    names = [s.name for s in seams]
    limits = ", ".join(f"{s.display_name}'s {s.concurrency_arg}" for s in seams)
    r.add_argument("--server", choices=names,
                   help=f"the engine: {' or '.join(names)} (with --spec, default its backend.type)")
    r.add_argument("--model-path", metavar="M",
                   help="the model (a folder or a hub name; with --spec, default its model.path if that is a "
                        "folder here)")
    r.add_argument("--tp", type=int, default=1, metavar="N", help="tensor parallel size (default 1)")
    r.add_argument("--pp", type=int, default=1, metavar="N", help="pipeline parallel size (default 1)")
    r.add_argument("--dp", type=int, default=1, metavar="N", help="data parallel size (default 1)")
    r.add_argument("--prompts", "--num-prompts", dest="prompts", type=int, metavar="N",
                   help=f"requests sent (default {PROMPTS}; with --concurrency C, enough to keep C in flight "
                        f"through the window; with --spec at least {srtctl.DEFAULT_NUM_PROMPTS}, as srtctl's "
                        "profiling script sends)")
    r.add_argument("--max-tokens", "--osl", dest="max_tokens", type=int, metavar="N",
                   help=f"tokens generated per request, exactly (end of sequence ignored; default {MAX_TOKENS})")
    r.add_argument("--isl", type=int, metavar="N",
                   help="each request N random tokens long (default: a few short text prompts)")
    r.add_argument("--concurrency", type=int, metavar="N",
                   help=f"at most N requests running at once (the engine's own limit: {limits}); default the "
                        "engine's")
    r.add_argument("--start-step", type=int, metavar="N",
                   help="skip the first N forward passes (warm-up): record from pass N+1 (default 0); with "
                        "--url on SGLang, SGLang's own start_step (the server's forward count)")
    r.add_argument("--stop-step", type=int, metavar="N",
                   help="record up to pass N: stop-step - start-step passes in all (default: to the end)")
    r.add_argument("--url", metavar="URL",
                   help="drive a server started elsewhere (armed: SGLANG_PROFILE_SHAPES=on_request) instead of "
                        "starting an engine: shapes asked through its /start_profile, the workload sent to it")
    r.add_argument("--api-key", metavar="KEY", help="the server's API key (--url), sent as a bearer token")
    r.add_argument("--spec", metavar="JOB.yaml",
                   help="run the profiles a srtctl job file's profiling: section asks for (type: shapes): one per "
                        "role, its window and traffic, into DIR/prefill, DIR/decode or DIR/agg (docs/traffic.md)")
    r.add_argument("--worker-url", action="append", default=[], metavar="ROLE=URL",
                   help="with --spec and --url: a worker's own server, asked for shapes over its role's window "
                        "(prefill=URL, decode=URL; repeatable); --url is then where the traffic goes (the router)")
    r.add_argument("--engine-arg", action="append", default=[], metavar="KEY=VALUE",
                   help=f"an argument of {' / '.join(s.engine_api for s in seams)} (VALUE read as JSON if it parses: "
                        "dtype=float32, enforce_eager=true); repeatable")
    r.add_argument("--dedupe", action="store_true", help="write each signature once")
    r.add_argument("-o", "--output-dir", default="shapeprof-run", metavar="DIR",
                   help="where the records files and engine.log go (default shapeprof-run)")
    r.set_defaults(func=run)


def _engine_args(pairs) -> dict:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise fail(f"--engine-arg {pair!r} must be KEY=VALUE")
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out


def _analyze(paths: list) -> None:
    parser = argparse.ArgumentParser(prog="sgl-shapeprof")
    analyze.add_parser(parser.add_subparsers())
    analyze.run(parser.parse_args(["analyze", *paths, "--top", "10", "--no-diversity"]))


def _window(start, stop) -> dict:
    """The recorder's settings for a window of forward passes [start, stop)."""
    from ..recording import config
    if start is not None and start < 0:
        raise fail(f"--start-step {start}: must be at least 0")
    if stop is not None and stop <= (start or 0):
        raise fail(f"--stop-step {stop}: must be greater than --start-step ({start or 0})")
    out = {}
    if start:
        out[config.ENV_SKIP_WARMUP] = str(start)
    if stop is not None:
        out[config.ENV_LOG_N_PASSES] = str(stop - (start or 0))
    return out


def progress(out_dir: str, total: Optional[int]) -> str:
    """'recorded 12/50 passes': the most any worker's summary snapshot says
    it logged (each worker's runs as the engine steps)."""
    logged = 0
    for path in glob.glob(os.path.join(glob.escape(out_dir), f"{RECORDS_STEM}*{SUMMARY_SUFFIX}")):
        try:
            with open(path) as f:
                n = json.load(f).get("logged_forward_passes")
        except (OSError, ValueError, AttributeError):
            continue  # being rewritten: the next look reads it
        if isinstance(n, int) and n > logged:
            logged = n
    return f"recorded {logged}{f'/{total}' if total else ''} pass{'es' if (total or logged) != 1 else ''}"


def _wait(child: subprocess.Popen, out_dir: str, total: Optional[int], err) -> int:
    """The engine's exit status; meanwhile, on a terminal, its progress in
    one line that rewrites itself."""
    live = hasattr(err, "isatty") and err.isatty()
    shown = ""
    while True:
        try:
            rc = child.wait(timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            if live:
                line = progress(out_dir, total)
                if line != shown:
                    err.write(f"\r{line} ")
                    err.flush()
                    shown = line
    if live and shown:
        err.write(f"\r{progress(out_dir, total)}\n")
    return rc


def _positive(args: argparse.Namespace) -> None:
    for option in ("tp", "pp", "dp", "prompts", "max_tokens", "isl", "concurrency"):
        value = getattr(args, option)
        if value is not None and value < 1:
            raise fail(f"--{option.replace('_', '-')} {value}: must be at least 1")


def run(args: argparse.Namespace) -> int:
    _positive(args)
    if args.spec:
        return run_spec(args)
    if args.worker_url:
        raise fail("--worker-url goes with --spec and --url (a disaggregated deployment's workers)")
    if not args.server:
        raise fail("--server is required (or --spec, whose backend.type names it)")
    if not args.model_path:
        raise fail("--model-path is required")
    args.max_tokens = args.max_tokens or MAX_TOKENS
    _window(args.start_step, args.stop_step)
    if args.api_key and not args.url:
        raise fail("--api-key goes with --url (a server started elsewhere)")
    if not args.prompts:
        args.prompts = PROMPTS if args.concurrency is None else \
            prompts_in_flight(args.concurrency, args.max_tokens, args.start_step, args.stop_step)
    return run_remote(args) if args.url else run_local(args)


def _refuse_unrunnable(server: str, model_path: str, given_as: str = "--model-path") -> None:
    """A local run: a model folder that cannot be read, or a server this
    Python cannot import, refused in one line before anything is created
    (the engine child would end in a traceback)."""
    from ..integrations.engines import model_folder_problem, not_installed
    why = model_folder_problem(model_path)
    if why:
        raise fail(f"{given_as} {why}")
    why = not_installed(server)
    if why:
        raise fail(f"--server {server}: {why}")


def _refuse_records_in(out_dir: str) -> None:
    """A folder that holds records already is not run into (its files would mix)."""
    stale = glob.glob(os.path.join(glob.escape(out_dir), f"{RECORDS_STEM}*{RECORDS_EXT}"))
    if stale:
        raise fail(f"{out_dir} already holds {os.path.basename(stale[0])}: give another --output-dir")


def run_local(args: argparse.Namespace) -> int:
    """Starts the engine, sends the workload, records the window; analyzes."""
    window = _window(args.start_step, args.stop_step)
    out_dir = os.path.abspath(args.output_dir)
    # the engine runs in out_dir: a local folder given relative to here must still be found
    model = os.path.abspath(args.model_path) if os.path.exists(args.model_path) else args.model_path
    spec = {"server": args.server, "model_path": model, "tp": args.tp, "pp": args.pp, "dp": args.dp,
            "prompts": args.prompts, "max_tokens": args.max_tokens, "isl": args.isl,
            "engine_args": _engine_args(args.engine_arg), "output": os.path.join(out_dir, "outputs.json")}
    from ..integrations.engines import engine
    server = engine(args.server)
    concurrency_arg = seam(args.server).concurrency_arg
    if args.concurrency is not None:
        # the engine's limit is each data-parallel replica's (its own
        # scheduler), and the replicas take the requests in turn: N in
        # flight in all is N/dp in each
        if args.concurrency % args.dp:
            raise fail(f"--concurrency {args.concurrency} with --dp {args.dp}: each replica runs at most "
                       f"concurrency/dp requests (its own scheduler's limit): give a multiple of {args.dp}")
        per_replica = args.concurrency // args.dp
        given = spec["engine_args"].get(concurrency_arg)
        if given is not None and given != per_replica:
            raise fail(f"--concurrency {args.concurrency} and --engine-arg {concurrency_arg}={given} "
                       f"disagree: give one")
        spec["engine_args"][concurrency_arg] = per_replica
    why = server.refuse(spec)
    if why:
        raise fail(why)
    _refuse_records_in(out_dir)
    _refuse_unrunnable(args.server, args.model_path)
    if args.concurrency:  # (a count run chose itself is never too few)
        _too_few(args.prompts, args.concurrency, args.max_tokens, args.start_step, args.stop_step)
    os.makedirs(out_dir, exist_ok=True)
    from ..recording import config
    settings = {config.ENV_ENABLE: "1", config.ENV_RANK: "all", config.ENV_DEDUPE: "1" if args.dedupe else "0",
                config.ENV_FILE: os.path.join(out_dir, RECORDS_STEM + RECORDS_EXT), **window}
    env = config.child_environ(settings, keep_others=False)  # run decides them all
    for line in server.prepare(spec, env):
        print(f"sgl-shapeprof run: {line}", file=sys.stderr)
    with open(os.path.join(out_dir, "run.json"), "w") as f:
        json.dump(spec, f)
    log_path = os.path.join(out_dir, "engine.log")
    layout = ", ".join(f"{k}={v}" for k, v in (("TP", args.tp), ("PP", args.pp), ("DP", args.dp))
                       if v > 1 or k == "TP")
    load = (f"{args.prompts} requests of {args.isl} random tokens" if args.isl else f"{args.prompts} prompts") + \
        f" x {args.max_tokens} token{'s' if args.max_tokens != 1 else ''}" + \
        (f", at most {args.concurrency} at once" if args.concurrency else "") + \
        (f" ({args.concurrency // args.dp} in each replica)" if args.concurrency and args.dp > 1 else "")
    # passes are numbered from 1 in the records, warm-up included
    steps = "" if not window else (f"; recording passes {(args.start_step or 0) + 1} to "
                                   f"{args.stop_step if args.stop_step is not None else 'the end'}")
    print(f"running {args.server} on {args.model_path} ({layout}, {load}{steps}); engine log: {log_path}",
          file=sys.stderr)
    total = (args.stop_step - (args.start_step or 0)) if args.stop_step is not None else None
    with open(log_path, "w") as log:
        child = subprocess.Popen([sys.executable, "-m", "sgl_shapeprof.integrations.engines",
                                  os.path.join(out_dir, "run.json")], stdout=log, stderr=subprocess.STDOUT,
                                 env=env, cwd=out_dir)
        try:
            rc = _wait(child, out_dir, total, sys.stderr)
        except BaseException:  # interrupted (Ctrl-C): the engine does not outlive run
            child.terminate()  # its engine.shutdown() ends the server's processes
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            raise
    if rc != 0:
        with open(log_path, errors="replace") as f:
            tail = f.read()[-3000:]
        sys.stderr.write(tail)
        raise fail(f"the {args.server} engine exited with status {rc} (its log: {log_path})")
    files = sorted(glob.glob(os.path.join(glob.escape(out_dir), f"{RECORDS_STEM}*{RECORDS_EXT}")))
    if not files:
        raise fail(f"the {args.server} engine ran but recorded nothing{server.NOT_RECORDED_HINT}; "
                   f"its log: {log_path}")
    _analyze([out_dir])  # together, in worker order: each file labelled, the deployment inventoried
    return 0


# run --url without --concurrency: every request at once, up to this many
URL_CONCURRENCY = 256


def _prompts(args: argparse.Namespace) -> list:
    """The workload for a running server: fresh token ids each run (its
    prefix cache keeps earlier prompts, which would shorten their prefill)."""
    from ..integrations.engines import workload
    model = os.path.abspath(args.model_path) if os.path.exists(args.model_path) else args.model_path
    try:
        return workload({"prompts": args.prompts, "isl": args.isl, "model_path": model,
                         "seed": int.from_bytes(os.urandom(4), "little")})
    except Exception as e:  # no transformers here, a model folder it cannot read
        raise fail(f"--isl: cannot read the vocabulary size of {args.model_path} ({type(e).__name__}: "
                   f"{str(e).splitlines()[0] if str(e) else ''})")


def _drive(args: argparse.Namespace, arms: list) -> list:
    """Arms each worker [(url, output folder, start, stop)] through its
    /start_profile, sends the workload to --url, closes every window
    armed (also when a request fails or the run is interrupted: a server
    is never left recording); the files each reply names, per arm."""
    import importlib

    from ..integrations.http_client import printable
    remote = importlib.import_module(seam(args.server).remote)
    prompts = _prompts(args)
    armed, files = [], []
    try:
        try:
            for url, out_dir, start, stop in arms:
                os.makedirs(out_dir, exist_ok=True)
                reply, named = remote.start(url, args.api_key, out_dir, start, stop)
                armed.append(url)
                files.append(named)
                sys.stderr.write(printable(reply) + "\n")
            sent = [0]
            live = sys.stderr.isatty()

            def done(n: int) -> None:
                sent[0] += n
                if live:
                    sys.stderr.write(f"\rsent {sent[0]}/{len(prompts)} requests ")
                    sys.stderr.flush()
            outputs = remote.generate(args.url, args.api_key, prompts, args.max_tokens,
                                      args.concurrency or min(len(prompts), URL_CONCURRENCY), done)
            if live:
                sys.stderr.write("\n")
        finally:  # a request that failed, an interrupt: the servers' windows are closed all the same
            for url in armed:
                remote.stop(url, args.api_key)
    except remote.RemoteError as e:
        raise fail(str(e))
    for _, out_dir, _, _ in arms:
        with open(os.path.join(out_dir, "outputs.json"), "w") as f:
            json.dump({"outputs": outputs}, f)
    return files


def _local_files(named: list) -> list:
    """The files (or patterns) a reply named that are on this machine."""
    local = []
    for p in named:
        found = sorted(glob.glob(p)) if "*" in p else [p] if os.path.exists(p) else []
        local += found
        if not found and "*" not in p:
            print(f"sgl-shapeprof run: {p} is on the server's machine, not here", file=sys.stderr)
    return local


def _started_elsewhere(args: argparse.Namespace) -> None:
    """--url: what starting an engine takes is refused (the server is its own)."""
    for option, default in (("tp", 1), ("pp", 1), ("dp", 1), ("engine_arg", []), ("dedupe", False)):
        if getattr(args, option) != default:
            raise fail(f"--{option.replace('_', '-')}: the server at --url is started already (it is its own)")


def run_remote(args: argparse.Namespace) -> int:
    """run --url: a server started elsewhere, asked for SHAPES over the
    window, sent the workload, its window closed; the files its reply names
    analyzed where they are on this machine."""
    _started_elsewhere(args)
    if args.concurrency:
        _too_few(args.prompts, args.concurrency, args.max_tokens, args.start_step, args.stop_step)
    (named,) = _drive(args, [(args.url, os.path.abspath(args.output_dir), args.start_step, args.stop_step)])
    local = _local_files(named)
    if local:
        _analyze(local)
    return 0


def _spec_server(args: argparse.Namespace, job: "srtctl.JobSpec") -> str:
    """--server and --model-path from the job file where not given; how the
    model was given."""
    backend = srtctl.backend(job)
    server = srtctl_backends().get(backend)  # the server whose seam says it is srtctl's `backend`
    if args.server and job.backend and server != args.server:
        raise fail(f"--server {args.server}, but {job.path}'s backend.type is {job.backend}")
    args.server = args.server or server
    if args.server is None:
        raise fail(f"{job.path}'s backend.type is {backend}: run drives {' or '.join(servers())}")
    if not args.model_path:
        if not (job.model_path and os.path.isdir(job.model_path)):
            raise fail(f"--model-path is required: {job.path}'s model.path ({job.model_path or 'none'}) is not a "
                       "folder here (srtctl resolves its aliases itself)")
        args.model_path = job.model_path
        return f"{job.path}'s model.path"
    return "--model-path"


def _share(job: "srtctl.JobSpec", p: "srtctl.Profile") -> "srtctl.Profile":
    """What a role's engine is sent here: a disaggregated prefill role, a
    prefill worker's share of each request."""
    return srtctl.prefill_share(p) if job.disaggregated and p.role == "prefill" else p


def _spec_prompts(args: argparse.Namespace, job: "srtctl.JobSpec") -> dict:
    """The requests sent per role: --num-prompts, else srtctl's number or
    more, as many as keep the role's concurrency in flight through its
    window."""
    return {p.role: args.prompts or max(srtctl.DEFAULT_NUM_PROMPTS, prompts_in_flight(
        p.concurrency, _share(job, p).osl, p.start_step, p.stop_step)) for p in job.profiles}


def _plan(job: "srtctl.JobSpec", root: str, counts: dict) -> None:
    for p in job.profiles:
        print(f"{job.path}: {p.role}: passes {p.start_step + 1} to {p.stop_step}, {counts[p.role]} requests of "
              f"{p.isl} tokens x {p.osl}, at most {p.concurrency} at once -> {os.path.join(root, p.folder)}",
              file=sys.stderr)


def run_spec(args: argparse.Namespace) -> int:
    """run --spec: the profiles a srtctl job file asks for, one per role,
    each into its folder: locally, an engine per role (a prefill role sent
    its share: the prompts and one token each, as a prefill worker serves
    them); with --url, every role's workers armed at once and one workload
    sent through the deployment's front."""
    for option, flag in (("isl", "--isl"), ("max_tokens", "--osl"), ("start_step", "--start-step"),
                         ("stop_step", "--stop-step")):
        if getattr(args, option) is not None:
            raise fail(f"{flag}: the job file gives it (--spec); --concurrency picks one of its concurrencies")
    try:
        job = srtctl.read(args.spec, args.concurrency)
    except srtctl.SpecError as e:
        raise fail(str(e))
    if args.worker_url and not args.url:
        raise fail("--worker-url goes with --url (the deployment's front, where the traffic goes)")
    model_given_as = _spec_server(args, job)
    root = os.path.abspath(args.output_dir)
    if args.url:
        return _run_spec_remote(args, job, root)
    for p in job.profiles:  # before any engine starts: a role's folder that holds records is refused
        _refuse_records_in(os.path.join(root, p.folder))
    if args.api_key:
        raise fail("--api-key goes with --url (a server started elsewhere)")
    _refuse_unrunnable(args.server, args.model_path, model_given_as)
    counts = _spec_prompts(args, job)
    _plan(job, root, counts)
    for p in job.profiles:
        share = _share(job, p)
        if share is not p:
            print(f"{p.role}: one engine serves it here: each request's prompt and first token only (a prefill "
                  "worker's share), so its window holds prefill passes", file=sys.stderr)
        run_local(argparse.Namespace(**{**vars(args), "isl": share.isl, "max_tokens": share.osl,
                                        "concurrency": share.concurrency, "start_step": share.start_step or None,
                                        "stop_step": share.stop_step, "prompts": counts[p.role],
                                        "output_dir": os.path.join(root, share.folder)}))
    return 0


def _run_spec_remote(args: argparse.Namespace, job: "srtctl.JobSpec", root: str) -> int:
    """Every role's workers armed with its window; one workload to --url."""
    _started_elsewhere(args)
    roles = {p.role: p for p in job.profiles}
    workers: dict = {}
    for pair in args.worker_url:
        role, sep, url = pair.partition("=")
        role = "aggregated" if role == "agg" else role
        if not sep or not url:
            raise fail(f"--worker-url {pair!r} must be ROLE=URL")
        if role not in roles:
            raise fail(f"--worker-url {pair!r}: {job.path} profiles {' and '.join(roles)}, not {role}")
        workers.setdefault(role, []).append(url)
    if not workers and not job.disaggregated:
        workers = {"aggregated": [args.url]}
    missing = [r for r in roles if r not in workers]
    if missing:
        raise fail(f"--worker-url {missing[0]}=URL is missing: a disaggregated deployment's workers are asked for "
                   "shapes each on its own server (srtctl's PROFILE_PREFILL_IPS / PROFILE_DECODE_IPS)")
    loads = {(p.isl, p.osl, p.concurrency) for p in job.profiles}
    if len(loads) > 1:
        raise fail(f"{job.path}: prefill and decode give different traffic, but a deployment is sent one "
                   "workload (through --url)")
    counts = _spec_prompts(args, job)
    for p in job.profiles:  # (locally, run_local says it per role)
        _too_few(counts[p.role], p.concurrency, _share(job, p).osl, p.start_step, p.stop_step, role=f"{p.role}: ")
    _plan(job, root, dict.fromkeys(counts, max(counts.values())))  # one workload: enough for every role
    p = job.profiles[0]
    args.isl, args.max_tokens, args.concurrency = p.isl, p.osl, p.concurrency
    args.prompts = max(counts.values())
    arm_roles = [role for role in roles for _ in workers[role]]
    named = _drive(args, [(url, os.path.join(root, roles[role].folder), roles[role].start_step or None,
                           roles[role].stop_step) for role in roles for url in workers[role]])
    for role in roles:  # each role analyzed apart, as srtctl keeps them apart
        local = _local_files([f for r, n in zip(arm_roles, named) if r == role for f in n])
        if local:
            _analyze(local)
    return 0
