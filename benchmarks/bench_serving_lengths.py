"""Why `sgl-shapeprof run` sends its own requests rather than SGLang's
bench_serving: how many of bench_serving's random prompts the server
tokenizes to exactly --random-input-len tokens.

    python benchmarks/bench_serving_lengths.py [TOKENIZER_DIR]   (in SGLang's venv)

bench_serving's random dataset draws token ids, decodes them to text and
sends the text; the server encodes it again. With a byte-level BPE
tokenizer (GPT-2's and Llama-3's kind) the merges of the decoded text are
not the ids drawn, so the length changes. Its own sampler is run here
(sglang.benchmark.datasets.random.sample_random_requests, random_sample=
False: its other mode downloads ShareGPT from the hub) and each prompt is
encoded as the server encodes it (tokenizer.encode, special tokens added).
Without TOKENIZER_DIR a byte-level BPE tokenizer of 8,192 tokens is
trained on this Python's standard library (this machine reaches no model
hub); give a real model's tokenizer folder to measure that one.
"""
import glob
import os
import random
import sys
import sysconfig
import tempfile
import types

import numpy as np


def trained_bpe(folder: str) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "**", "*.py"), recursive=True))[:800]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train(files, trainers.BpeTrainer(vocab_size=8192, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                         show_progress=False))
    PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(folder)
    return folder


def main() -> None:
    sys.modules.setdefault("datasets", types.SimpleNamespace(load_dataset=None))  # its MMMU loader's import only
    from sglang.benchmark.datasets.random import sample_random_requests
    from transformers import AutoTokenizer
    folder = sys.argv[1] if len(sys.argv) > 1 else trained_bpe(tempfile.mkdtemp())
    tok = AutoTokenizer.from_pretrained(folder)
    print(f"tokenizer: {folder if len(sys.argv) > 1 else 'byte-level BPE trained here'}, {tok.vocab_size} tokens; "
          "64 prompts each")
    print(f"{'--random-input-len':>18}  {'exactly that':>12}  {'min':>5}  {'median':>6}  {'max':>5}")
    for isl in (16, 128, 1024):
        np.random.seed(0)
        random.seed(0)
        rows = sample_random_requests(input_len=isl, output_len=8, num_prompts=64, range_ratio=1.0, tokenizer=tok,
                                      dataset_path="", random_sample=False, return_text=True)
        lens = [len(tok.encode(r.prompt)) for r in rows]
        print(f"{isl:>18}  {sum(n == isl for n in lens):>9}/64  {min(lens):>5}  {int(np.median(lens)):>6}  "
              f"{max(lens):>5}")


if __name__ == "__main__":
    main()
