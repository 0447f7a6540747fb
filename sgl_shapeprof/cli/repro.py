"""`sgl-shapeprof repro`: a standalone script per recorded call (the failed
ones by default) that calls it again and says whether it fails the same way."""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from typing import List, Optional

from ..records.reader import InputError, summary_path_for
from ..records.paths import expand_paths
from ..render.jsonout import repro_call_json, repro_index_json, write_json, write_jsonl
from .common import EXISTS, add_filters, add_imports, fail, filter_of, import_modules, notes, open_new

ARCHIVES = {".tar.gz": "gztar", ".tgz": "gztar", ".zip": "zip"}


def add_parser(sub: "argparse._SubParsersAction") -> None:
    r = sub.add_parser("repro", help="write a standalone script per recorded call (the ones that raised, or "
                                     "crashed the process, by default) that calls it again: a bug report's repro")
    r.add_argument("file", metavar="FILE", help="a records file recorded with --args")
    r.add_argument("--call", dest="calls", type=int, action="append", default=[], metavar="ID",
                   help="the record with this call_id (repeat for more); default: every call that raised "
                        "or was cut by a crash, one per distinct call")
    r.add_argument("--errors", action="store_true",
                   help="with filters: only the calls that raised or were cut by a crash")
    add_filters(r)
    add_imports(r)
    r.add_argument("-o", "--out", default="repro", metavar="DIR", help="write the scripts into DIR "
                                                                       "(default ./repro)")
    r.add_argument("--bundle", metavar="PATH", help="write the scripts, an index.json and the chosen records "
                   "(records.jsonl, with the summary) into one folder PATH, or one archive when PATH ends in "
                   ".tar.gz, .tgz or .zip: to attach to a bug report")
    r.add_argument("--run", action="store_true", help="run each script in a fresh interpreter and say "
                   "whether it reproduced the record; exit status 1 unless every call did")
    r.add_argument("--timeout", type=float, default=300, metavar="S",
                   help="with --run, give up on a script after S seconds (default 300)")
    r.add_argument("--force", action="store_true", help="replace existing scripts and bundles")
    r.set_defaults(func=run)


def _archive_kind(path: str) -> Optional[str]:
    return next((kind for ext, kind in ARCHIVES.items() if path.endswith(ext)), None)


def run(args: argparse.Namespace) -> int:
    from ..replay.scripts import NotReproducible, invalid, run_script, script, select
    if args.timeout <= 0:
        raise fail("--timeout must be > 0")
    try:
        paths = expand_paths([args.file])
    except (InputError, ValueError) as e:
        raise fail(str(e)) from None
    if len(paths) != 1:
        raise fail(f"{args.file} names {len(paths)} files; repro takes one")
    path = paths[0]
    import_modules(args.imports)
    flt = filter_of(args)
    try:
        sel = select(path, flt, args.calls, args.errors)
    except (InputError, ValueError) as e:
        raise fail(str(e)) from None
    for line in notes([sel.source]):
        print(line)
    for cid in sel.missing:
        print(f"call {cid}: no record with this call_id in {path}", file=sys.stderr)
    if not sel.records:
        what = "the calls asked for" if args.calls else (
            "calls the filters keep" if flt.active and not args.errors else "calls that raised or were cut by a crash")
        print(f"no {what} in {path}" + ("" if args.calls or flt.active else
                                         ": give --call ID or a filter (--filter-op) to write scripts for others"))
        return 1 if args.calls else 0
    if sel.source.deduplicated:
        print(f"{path} is deduplicated: a call that repeated a signature already written is not in the file "
              "(calls that raised always are); a record's float arguments are its first call's")

    archive = _archive_kind(args.bundle) if args.bundle else None
    final = args.bundle or args.out
    if args.bundle and os.path.exists(args.bundle) and not args.force:
        raise fail(EXISTS.format(path=args.bundle))
    # an archive holds one folder named as it is (bug.tar.gz: bug/)
    stem = os.path.basename(final)[:-len(next((e for e in ARCHIVES if final.endswith(e)), ""))]
    temp = tempfile.mkdtemp(prefix="sgl-shapeprof-repro-") if archive else None
    work = os.path.join(temp, stem or "repro") if temp else final
    try:
        os.makedirs(work, exist_ok=True)
    except OSError as e:
        raise fail(f"cannot create {work}: {e.strerror or e}") from None
    where = f"{os.path.basename(path)}"
    index, ok, n_ok = [], True, 0
    try:
        for rec in sel.records:
            cid = rec.get("call_id")
            # a record is untrusted: what fails validation is shown as a literal
            head = f"call {cid}: {rec.get('operation')}" if not invalid(rec) else f"call {cid!r}"
            try:
                s = script(rec, f"{where} (forward pass {rec.get('forward_pass')})", args.imports,
                           sel.source.deduplicated)
            except NotReproducible as e:
                ok = False
                print(f"{head}: no script: {e}")
                index.append(repro_call_json(rec, reason=str(e)))
                continue
            target = os.path.join(work, s.name)
            with open_new(target, args.force) as f:
                f.write(s.text)
            # inside an archive, a script is a member, not a file on disk
            print(f"{head} -> " + (f"{os.path.basename(work)}/{s.name} in {final}" if archive else os.path.join(final, s.name)))
            for note in s.notes[1:]:
                print(f"    {note}")
            o = None
            if args.run:
                o = run_script(target, rec, args.timeout)
                ok = ok and o.ok
                n_ok += o.ok
                print(f"    {o.word}: {o.line}" if o.line and not o.line.startswith(o.word) else f"    {o.line or o.word}")
            index.append(repro_call_json(rec, s, outcome=o))
        if args.bundle:
            _bundle_files(work, path, sel.records, index, args.force)
        if archive:
            _archive(work, args.bundle, archive, args.force)
    finally:
        if temp:
            shutil.rmtree(temp, ignore_errors=True)
    if args.bundle:
        print(f"bundle: {args.bundle}")
    if args.run:
        print(f"{n_ok} of {len(index)} calls as recorded")
        return 0 if ok else 1
    return 0


def _bundle_files(folder: str, path: str, records: List[dict], index: List[dict], force: bool) -> None:
    with open_new(os.path.join(folder, "records.jsonl"), force) as f:
        write_jsonl(records, f)
    summary = summary_path_for(path)
    if os.path.exists(summary):
        with open(summary, encoding="utf-8") as src, open_new(os.path.join(folder, "summary.json"), force) as f:
            f.write(src.read())
    with open_new(os.path.join(folder, "index.json"), force) as f:
        write_json(repro_index_json(path, index), f)


def _archive(folder: str, target: str, kind: str, force: bool) -> None:
    """The folder as one archive at target (a new file unless force)."""
    base = tempfile.mkdtemp(prefix="sgl-shapeprof-archive-")
    try:
        made = shutil.make_archive(os.path.join(base, "bundle"), kind, root_dir=os.path.dirname(folder),
                                   base_dir=os.path.basename(folder))
        try:
            if force:
                shutil.move(made, target)
            else:
                with open(made, "rb") as src, open(target, "xb") as dst:
                    shutil.copyfileobj(src, dst)
        except FileExistsError:
            raise fail(EXISTS.format(path=target)) from None
        except OSError as e:
            raise fail(f"cannot write {target}: {e.strerror or e}") from None
    finally:
        shutil.rmtree(base, ignore_errors=True)
