"""run --spec: the profiles a srtctl job file asks for, one per role."""
from __future__ import annotations

import argparse
import os
import sys

from ...integrations import srtctl
from ...integrations.registry import servers, srtctl_backends
from ...records.worker import PREFILL_ROLE
from ..common import fail
from .local import analyze_files, refuse_records_in, refuse_unrunnable, run_local
from .remote import drive, local_files, started_elsewhere
from .window import prompts_in_flight, too_few


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
    return srtctl.prefill_share(p) if job.disaggregated and p.role == PREFILL_ROLE else p


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
        refuse_records_in(os.path.join(root, p.folder))
    if args.api_key:
        raise fail("--api-key goes with --url (a server started elsewhere)")
    refuse_unrunnable(args.server, args.model_path, model_given_as)
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
    started_elsewhere(args)
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
        too_few(counts[p.role], p.concurrency, _share(job, p).osl, p.start_step, p.stop_step, role=f"{p.role}: ")
    _plan(job, root, dict.fromkeys(counts, max(counts.values())))  # one workload: enough for every role
    p = job.profiles[0]
    args.isl, args.max_tokens, args.concurrency = p.isl, p.osl, p.concurrency
    args.prompts = max(counts.values())
    arm_roles = [role for role in roles for _ in workers[role]]
    named = drive(args, [(url, os.path.join(root, roles[role].folder), roles[role].start_step or None,
                           roles[role].stop_step) for role in roles for url in workers[role]])
    for role in roles:  # each role analyzed apart, as srtctl keeps them apart
        local = local_files([f for r, n in zip(arm_roles, named) if r == role for f in n])
        if local:
            analyze_files(local)
    return 0
