"""What an armed server pays to keep its CUDA graph captures (issue 52), and
what a request pays to write them out.

    python benchmarks/kept_captures.py [--layers 61] [--rounds 5] [--max-bs 256]

The workload: SGLang's default decode capture sizes (its own
generate_decode_cuda_graph_batch_sizes when SGLang is installed, else the
same list written here) of a Llama decoder with --layers layers (random
weights, hidden 64), one decode step per size run as a graph's capture run
is: inside capture_graph(size). On a CPU nothing is captured into a graph:
what is measured is the profiler's part of a capture.

Rows, in interleaved rounds (order rotating; median over rounds):
- no profiler: the capture runs alone (the base);
- armed: an OnRequestProfiler keeping every capture (recorded apart into a
  private file, read back into memory, the file removed);
- from start-up: a ShapeProfiler recording the same captures into its file.
Each with deduplication off (the default) and on.

Then, in a fresh process per setting: the memory kept (the records' bytes,
and the process's RSS growth, per captured call), and a request's write-out:
one pass replaying every graph, which writes each kept capture into the
request's file (the first replay of each graph in the window).
"""
import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402

# SGLang 0.5.23's arg_groups/cuda_graph_hook.py, without speculative decoding
# or --disable-cuda-graph-padding, up to max_bs (used when SGLang is absent)
def default_sizes(max_bs: int) -> list:
    try:
        from types import SimpleNamespace
        from sglang.srt.arg_groups.cuda_graph_hook import generate_decode_cuda_graph_batch_sizes
        args = SimpleNamespace(disable_cuda_graph_padding=False, speculative_algorithm=None)
        return sorted(set(generate_decode_cuda_graph_batch_sizes(args, max_bs))), "SGLang's own list"
    except Exception:
        sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + \
            list(range(512, max_bs + 1, 32))
        sizes = [s for s in sizes if s <= max_bs]
        return sorted(set(sizes + [max_bs])), "SGLang 0.5.23's list, written here"


def model(layers: int):
    import transformers
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=layers, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=256)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


def capture_all(prof, lm, sizes) -> float:
    """Each size's capture run; seconds."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        with torch.no_grad():
            for bs in sizes:
                ids = torch.zeros(bs, 1, dtype=torch.long)
                if prof is None:
                    lm(input_ids=ids, use_cache=False)
                else:
                    with prof.capture_graph(bs, "decode"):
                        lm(input_ids=ids, use_cache=False)
        return time.perf_counter() - start
    finally:
        gc.enable()


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def child(a) -> None:
    """One armed process: keeps every capture, then a request's write-out."""
    from sgl_shapeprof import OnRequestProfiler
    torch.set_num_threads(1)
    lm = model(a.layers)
    sizes, _ = default_sizes(a.max_bs)
    tmp = tempfile.mkdtemp(prefix="shapeprof-kept-")
    prof = OnRequestProfiler(output_dir=tmp, control=False, dedupe=a.dedupe)
    capture_all(None, lm, sizes[:2])  # warm: interning, allocator
    gc.collect()
    before = rss_kib()
    capture_all(prof, lm, sizes)
    gc.collect()
    after = rss_kib()
    kept = prof.captures.stats()
    path = prof.request(passes=1)
    start = time.perf_counter()
    with prof.forward_pass("decode"):
        for bs in sizes:
            prof.graph_replayed(bs)
    write_out = time.perf_counter() - start
    prof.close()
    st = json.load(open(path.replace(".jsonl", "_summary.json")))
    print(json.dumps({"graphs": kept["graphs"], "records": kept["records"], "bytes": kept["bytes"],
                      "calls": sum(st["operation_counts"].values()), "rss_kib": after - before,
                      "write_out_s": write_out, "written": st["total_operations"]}))
    shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=61)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-bs", type=int, default=256)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dedupe", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)
    from sgl_shapeprof import OnRequestProfiler, ShapeProfiler
    torch.set_num_threads(1)
    sizes, source = default_sizes(a.max_bs)
    lm = model(a.layers)
    print(f"{len(sizes)} decode graphs ({source}, max_bs {a.max_bs}): {sizes}")
    print(f"Llama decoder, {a.layers} layers, hidden 64; torch {torch.__version__}; {a.rounds} rounds")
    tmp = tempfile.mkdtemp(prefix="shapeprof-kept-")
    capture_all(None, lm, sizes[:2])
    rows = ["no profiler", "armed (kept)", "from start-up", "armed (kept), dedupe", "from start-up, dedupe"]
    times = {r: [] for r in rows}
    for rnd in range(a.rounds):
        for r in rows[rnd % len(rows):] + rows[:rnd % len(rows)]:
            dedupe = r.endswith("dedupe")
            if r == "no profiler":
                prof = None
            elif r.startswith("armed"):
                prof = OnRequestProfiler(output_dir=tmp, control=False, dedupe=dedupe)
            else:
                prof = ShapeProfiler(os.path.join(tmp, f"s{rnd}{r[-1]}.jsonl"), dedupe=dedupe)
            times[r].append(capture_all(prof, lm, sizes))
            if prof is not None:
                prof.close()
    base = statistics.median(times["no profiler"])
    print(f"\n{'row':26} {'all captures, s':>16} {'added, s':>10} {'x base':>7}")
    for r in rows:
        t = statistics.median(times[r])
        print(f"{r:26} {t:16.3f} {t - base:10.3f} {t / base:7.2f}")
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{'kept (fresh process)':26} {'graphs':>6} {'calls':>8} {'records':>8} {'MiB kept':>9} "
          f"{'RSS MiB':>8} {'B/call':>7} {'write-out ms':>13} {'µs/record':>10}")
    for dedupe in (False, True):
        out = subprocess.run([sys.executable, __file__, "--child", "--layers", str(a.layers),
                              "--max-bs", str(a.max_bs)] + (["--dedupe"] if dedupe else []),
                             capture_output=True, text=True, check=True)
        d = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{'dedupe' if dedupe else 'every call written':26} {d['graphs']:6d} {d['calls']:8d} "
              f"{d['records']:8d} {d['bytes'] / 2**20:9.1f} {d['rss_kib'] / 1024:8.1f} "
              f"{d['rss_kib'] * 1024 / d['calls']:7.0f} {d['write_out_s'] * 1e3:13.1f} "
              f"{d['write_out_s'] * 1e6 / max(1, d['written']):10.2f}")


if __name__ == "__main__":
    sys.exit(main())
