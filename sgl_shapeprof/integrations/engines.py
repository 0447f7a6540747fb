"""One offline run of a server's engine, for `sgl-shapeprof run`: start it,
send the prompts, shut it down (the server's engine.py, found through the
registry). Profiling comes from the environment the caller sets
(SHAPEPROF=1 ...), through the server's own integration (vLLM's plugin,
SGLang's start-up hook), exactly as for any other program.

    python -m sgl_shapeprof.integrations.engines SPEC.json

SPEC: {"server", "model_path", "tp", "pp", "dp", "prompts", "max_tokens", "isl",
"engine_args", "output"}; writes {"outputs": [[prompt tokens, output tokens],
...]} to output.
"""
from __future__ import annotations

import importlib
import json
import os
import sys
from types import ModuleType
from typing import List, Optional

from ..records import untrusted
from .registry import seam

PROMPTS = ["The capital of France is", "Write a haiku about GPUs:", "Explain tensor parallelism in one sentence:",
           "def fibonacci(n):", "Translate to German: good morning", "The three primary colors are",
           "Summarize the plot of Hamlet:", "List the planets of the solar system:"]


def prompts(n: int) -> List[str]:
    return [PROMPTS[i % len(PROMPTS)] for i in range(n)]


def random_prompts(n: int, length: int, model_path: str, seed: int = 0,
                   trust_remote_code: bool = False) -> List[List[int]]:
    """n requests of exactly `length` token ids, drawn from the model's
    vocabulary (its config's vocab_size, read by transformers), seeded."""
    import random

    from transformers import AutoConfig
    config = AutoConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code)
    vocab = getattr(config, "vocab_size", None) or getattr(getattr(config, "text_config", None), "vocab_size", None)
    if not vocab:
        raise ValueError(f"--isl: the model's config ({model_path}) gives no vocab_size to draw tokens from")
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(length)] for _ in range(n)]


def workload(spec: dict) -> list:
    """What the engine is sent: text prompts, or (isl) lists of token ids."""
    if spec.get("isl"):
        return random_prompts(spec["prompts"], spec["isl"], spec["model_path"], seed=spec.get("seed", 0),
                              trust_remote_code=bool(spec.get("engine_args", {}).get("trust_remote_code")))
    return prompts(spec["prompts"])


def engine(server: str) -> ModuleType:
    """The engine module of a server the registry lists (run_engine,
    prepare, refuse, NOT_RECORDED_HINT)."""
    return importlib.import_module(seam(server).engine)


def not_installed(server: str) -> Optional[str]:
    """Why the engine child (this Python, sys.executable, on this
    environment's path) cannot import the server, in one line, with what to
    install; None: it can. Finds the module without importing it; a
    folder of that name without __init__.py on the path (a namespace
    package: a checkout's top folder, our tests' tests/sglang) is not it."""
    import importlib.util
    s = seam(server)
    try:
        found = importlib.util.find_spec(s.module)
    except (ImportError, ValueError):
        found = None
    if found is not None and found.origin not in (None, "namespace"):
        return None
    return (f"{s.display_name} is not installed in this Python ({sys.executable}): {s.install} installs the "
            f"release tested; or run sgl-shapeprof from {s.display_name}'s environment")


# what marks a folder as a model: Hugging Face's config.json, or Mistral's own
# format (params.json), which vLLM reads too
MODEL_CONFIGS = ("config.json", "params.json")


def model_folder_problem(path: str) -> Optional[str]:
    """What is wrong with a local model folder, in one line naming it; None
    when it looks like one, or when path is a hub name (org/name: the
    engine fetches it) or a file (a GGUF checkpoint, say)."""
    if not os.path.exists(path):
        # a hub name is `name` or `org/name`; anything else is a path
        if os.path.isabs(path) or path.startswith((".", "~")) or path.count("/") > 1:
            return f"{path}: no such folder"
        return None
    if not os.path.isdir(path):
        return None
    try:
        names = set(os.listdir(path))
    except OSError as e:
        return f"{path}: cannot read the folder ({e.strerror or e})"
    found = [n for n in MODEL_CONFIGS if n in names]
    if not found:
        return (f"{path}: {'an empty folder' if not names else 'a folder'} without config.json (a model folder "
                "holds the model's config.json, its weights and its tokenizer)")
    config = os.path.join(path, found[0])
    try:
        with open(config, encoding="utf-8") as f:
            doc = untrusted.loads(f.read())
    except OSError as e:
        return f"{config}: cannot read it ({e.strerror or e})"
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        return f"{config} is not JSON ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
    if not isinstance(doc, dict):
        return f"{config} is not a JSON object (a model's config maps names to values)"
    return None


def main(argv: List[str]) -> None:
    with open(argv[0]) as f:
        spec = json.load(f)
    outputs = engine(spec["server"]).run_engine(spec, workload(spec))
    with open(spec["output"], "w") as f:
        json.dump({"outputs": outputs}, f)


if __name__ == "__main__":  # the engines start processes that import this main module
    main(sys.argv[1:])
