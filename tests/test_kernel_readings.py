"""Issue 53: analyze reads attention and fused-MoE calls as what they
compute. torch's SDPA recorded for real (no_grad: a backend's op; under
inference_mode: the whole op), and SGLang's fused-MoE records with its ops'
own parameter names. The oracle is the sizes the test built its tensors
from."""
import json

import torch
import torch.nn.functional as F

from sgl_shapeprof import ShapeProfiler
from sgl_shapeprof.cli.main import main

B, H, HKV, L, S, D = 2, 8, 2, 5, 7, 16


def test_analyze_reads_torch_sdpa_as_attention(tmp_path, capsys):
    path = str(tmp_path / "sdpa.jsonl")
    p = ShapeProfiler(path)
    q, k, v = torch.randn(B, H, L, D), torch.randn(B, HKV, S, D), torch.randn(B, HKV, S, D)
    with torch.no_grad():
        p.start_forward_pass("prefill")
        F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        p.end_forward_pass()
    q1 = q[:, :, :1].contiguous()
    with torch.inference_mode():
        p.start_forward_pass("decode")
        F.scaled_dot_product_attention(q1, k, v, enable_gqa=True)
        p.end_forward_pass()
    p.close()
    capsys.readouterr()
    assert main(["analyze", path, "--json"]) == 0
    att = {a["phase"]: a for a in json.loads(capsys.readouterr().out)["attention"]}
    got = {ph: (a["batch"], a["q_heads"], a["kv_heads"], a["head_dim"], a["q_tokens"], a["q_len"], a["kv_len"])
           for ph, a in att.items()}
    assert got == {"prefill": (B, H, HKV, D, B * L, L, S), "decode": (B, H, HKV, D, B, 1, S)}
    assert main(["analyze", path, "--show-shapes"]) == 0
    text = capsys.readouterr().out
    assert f"= attention: batch {B}, q heads {H}, kv heads {HKV}, head dim {D}, q len {L}, kv len {S}" in text
    assert f"= attention: batch {B}, q heads {H}, kv heads {HKV}, head dim {D}, q len 1, kv len {S}" in text


def t(shape, dtype="torch.bfloat16"):
    return {"shape": shape, "dtype": dtype}


def test_analyze_show_shapes_reads_fused_moe_calls(tmp_path, capsys):
    tokens, experts, top_k, n, hidden = 4, 64, 2, 512, 256
    recs = [
        # SGLang's fused-experts op: hidden_states [T, H], w1 [E, N, H], topk_ids [T, top-k]
        {"operation": "sglang.inplace_fused_experts.default",
         "inputs": {"hidden_states": t([tokens, hidden]), "w1": t([experts, n, hidden]),
                    "w2": t([experts, hidden, n // 2]), "topk_weights": t([tokens, top_k], "torch.float32"),
                    "topk_ids": t([tokens, top_k], "torch.int32")}, "outputs": None},
        # its Triton kernel's launch: rows = tokens x top-k
        {"operation": "triton:sglang.kernels.ops.moe.fused_moe_triton_kernels.fused_moe_kernel",
         "inputs": {"a_ptr": t([tokens, hidden]), "b_ptr": t([experts, n, hidden]),
                    "c_ptr": t([tokens, top_k, n])},
         "args": {"N": n, "K": hidden, "EM": 64, "num_valid_tokens": tokens * top_k, "top_k": top_k},
         "outputs": None},
    ]
    path = tmp_path / "moe.jsonl"
    with open(path, "w") as f:
        for i, r in enumerate(recs, 1):
            f.write(json.dumps({"call_id": i, "forward_pass": 1, "phase": "decode", **r}) + "\n")
    capsys.readouterr()
    assert main(["analyze", str(path), "--show-shapes"]) == 0
    text = capsys.readouterr().out
    want = f"= MoE: tokens {tokens}, E {experts}, top-k {top_k}, N {n}, K {hidden}"
    assert text.count(want) == 2, text


def test_analyze_reads_sgl_kernels_flash_attention_3(tmp_path, capsys):
    """sgl_kernel.fwd (FA3) by its schema's names: a paged decode (q
    [total_q, H, D], k [pages, page size, Hkv, D], page_table [B, pages per
    request]) and a varlen prefill (k [total_k, Hkv, D])."""
    b, h, hkv, d, page, per_req = 3, 16, 4, 128, 16, 8
    recs = [
        {"operation": "sgl_kernel.fwd.default", "phase": "decode",
         "inputs": {"q": t([b, h, d]), "k": t([100, page, hkv, d]), "v": t([100, page, hkv, d]),
                    "cu_seqlens_q": t([b + 1], "torch.int32"), "seqused_k": t([b], "torch.int32"),
                    "page_table": t([b, per_req], "torch.int32")}, "outputs": [t([b, h, d])]},
        {"operation": "sgl_kernel.fwd.default", "phase": "prefill",
         "inputs": {"q": t([40, h, d]), "k": t([40, hkv, d]), "v": t([40, hkv, d]),
                    "cu_seqlens_q": t([b + 1], "torch.int32"), "cu_seqlens_k": t([b + 1], "torch.int32")},
         "outputs": [t([40, h, d])]},
    ]
    path = tmp_path / "fa3.jsonl"
    with open(path, "w") as f:
        for i, r in enumerate(recs, 1):
            f.write(json.dumps({"call_id": i, "forward_pass": i, **r}) + "\n")
    capsys.readouterr()
    assert main(["analyze", str(path), "--json"]) == 0
    att = {a["phase"]: a for a in json.loads(capsys.readouterr().out)["attention"]}
    got = {ph: (a["batch"], a["q_heads"], a["kv_heads"], a["head_dim"], a["q_tokens"], a["kv_len_max"],
                a["kv_tokens"]) for ph, a in att.items()}
    assert got == {"decode": (b, h, hkv, d, b, per_req * page, None), "prefill": (b, h, hkv, d, 40, None, 40)}
