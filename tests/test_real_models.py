"""End to end on model code nobody here wrote (CPU, random weights, nothing
downloaded): transformers causal LMs running generate(), a diffusers UNet
running 50 DDIM steps. Each stream is compared record by record with the
TorchDispatchMode reference, and the analysis is checked."""
import json

import pytest
import torch
from helpers import PassPerForward, assert_same_stream, run_both, tiny_lm

from sgl_shapeprof.analysis.analyze import analyze_file

transformers = pytest.importorskip("transformers")
diffusers = pytest.importorskip("diffusers")


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_transformers_generate_matches_reference(tmp_path, arch):
    model = tiny_lm(arch)
    ids = torch.randint(1, 128, (2, 12), generator=torch.Generator().manual_seed(1))

    def work(marker):
        hooks = PassPerForward(model, marker)
        try:
            with torch.inference_mode():
                out = model.generate(ids, max_new_tokens=5, do_sample=False, attention_mask=torch.ones_like(ids))
        finally:
            hooks.remove()
        work.out = out

    ref, ours, prof = run_both(tmp_path, work)
    assert_same_stream(ref, ours)
    assert work.out.shape == (2, 17)
    s = json.load(open(prof.summary_path))
    assert s["forward_passes"] == 5  # prefill + 4 decode steps
    a = analyze_file(prof.path)
    assert not a.errors and a.records == len(ours)
    linear = a.ops["aten.linear.default"]
    # prefill sees 12 tokens, decode 1: distinct shapes for the same weights
    sigs = " ".join(s.text for s in linear.signatures)
    assert "input=[2, 12, 64] float32" in sigs and "input=[2, 1, 64] float32" in sigs


def test_diffusers_unet_50_steps_dedupe_matches_reference(tmp_path):
    torch.manual_seed(0)
    unet = diffusers.UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(32, 64), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32,
        attention_head_dim=8, norm_num_groups=8).eval()
    scheduler = diffusers.DDIMScheduler(num_train_timesteps=1000)
    gen = torch.Generator().manual_seed(2)
    ctx = torch.randn(1, 6, 32, generator=gen)
    noise = torch.randn(1, 4, 8, 8, generator=gen)

    def work(marker):
        scheduler.set_timesteps(50)
        x = noise.clone()
        with torch.inference_mode():
            marker.start_forward_pass("generate")   # one request = one pass, like the diffusion worker
            try:
                for t in scheduler.timesteps:
                    eps = unet(x, t, encoder_hidden_states=ctx).sample
                    x = scheduler.step(eps, t, x).prev_sample
            finally:
                marker.end_forward_pass()
        work.x = x

    ref, ours, prof = run_both(tmp_path, work, dedupe=True)
    assert_same_stream(ref, ours)
    assert torch.isfinite(work.x).all()
    s = json.load(open(prof.summary_path))
    ref_s = json.load(open(tmp_path / "ref_summary.json"))
    for key in ("total_operations", "dedupe_skipped_count", "unique_op_signatures", "operation_counts"):
        assert s[key] == ref_s[key], key
    assert s["dedupe_skipped_count"] > 20 * s["total_operations"]
    a = analyze_file(prof.path)
    assert "aten.convolution.default" in a.ops or "aten.conv2d.default" in a.ops
