"""Prints (or, with --write, writes) sgl_shapeprof's snapshot of FlashInfer's
templates (sgl_shapeprof/integrations/flashinfer/templates.json) as the
FlashInfer this Python imports has them. Run it with SGLang's environment and
its FlashInfer (tests/sglang_env/setup.sh):

    PYTHONPATH=.venv-torch2.14.1/flashinfer-0.7.2 .venv-torch2.14.1/bin/python \\
        tests/sglang_env/flashinfer_templates.py --write
"""
import argparse
import sys

from sgl_shapeprof.integrations.flashinfer import templates


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help=f"write {templates.SNAPSHOT} (else print)")
    text = templates.snapshot_text(templates.snapshot_of_installed())
    if ap.parse_args().write:
        with open(templates.SNAPSHOT, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
