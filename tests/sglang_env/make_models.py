#!/usr/bin/env python3
"""Write tiny random models for running SGLang's real engine on CPU.

    python make_models.py OUTDIR [--only llm|sd|vllm]

OUTDIR/tiny-llama : LlamaForCausalLM, 2 layers, hidden 64, random weights,
                    with an offline WordLevel tokenizer (tokenizer.json).
OUTDIR/tiny-llama-vllm : the same with hidden 128 and 2 heads of 64 (vLLM's
                    CPU attention rejects head_dim 16); only with --only vllm.
OUTDIR/tiny-qwen2moe : Qwen2MoeForCausalLM, 2 layers of 4 experts (2 per
                    token), hidden 64, tiny-llama's tokenizer (for expert
                    parallelism); made with llm.
OUTDIR/tiny-sd    : a StableDiffusionPipeline (UNet2DConditionModel,
                    AutoencoderKL, CLIPTextModel, CLIPTokenizer, DDIM scheduler),
                    all tiny, random weights, tokenizer vocab written offline.

Deterministic (fixed seeds, fixed vocab). Nothing is downloaded.
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

VOCAB_SIZE = 1024


def _words():
    # Fixed, deterministic word list: special tokens, then letters, digits and
    # some common English words, padded with synthetic words up to VOCAB_SIZE.
    special = ["<pad>", "<unk>", "<s>", "</s>"]
    base = list("abcdefghijklmnopqrstuvwxyz0123456789.,!?;:'\"-()")
    common = (
        "the of and to in is you that it he was for on are as with his they i at be "
        "this have from or one had by word but not what all were we when your can said "
        "there use an each which she do how their if will up other about out many then "
        "them these so some her would make like him into time has look two more write go "
        "see number no way could people my than first water been call who oil its now find "
        "long down day did get come made may part hello world capital france paris what "
        "tell me a story once upon cat dog red blue green photo of an astronaut riding horse"
    ).split()
    words = []
    for w in special + base + common:
        if w not in words:
            words.append(w)
    i = 0
    while len(words) < VOCAB_SIZE:
        words.append(f"w{i}")
        i += 1
    return words


def _bytes_to_unicode():
    # GPT-2/CLIP byte -> printable unicode table (same as the tokenizers' own).
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1))
          + list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def make_llama(out, hidden=64, heads=4, kv_heads=2):
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    os.makedirs(out, exist_ok=True)
    words = _words()
    vocab = {w: i for i, w in enumerate(words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Whitespace()]
    )
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", vocab["<s>"])]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=512,
    )
    fast.save_pretrained(out)

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=512,
        bos_token_id=vocab["<s>"],
        eos_token_id=vocab["</s>"],
        pad_token_id=vocab["<pad>"],
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    # generation_config.json makes SGLang's default sampling well defined
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(
            {"bos_token_id": vocab["<s>"], "eos_token_id": vocab["</s>"],
             "pad_token_id": vocab["<pad>"]},
            f,
        )


def make_moe(out, llama):
    """A tiny Qwen2-MoE with tiny-llama's tokenizer and special tokens."""
    import shutil

    import torch
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    os.makedirs(out, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        if os.path.exists(os.path.join(llama, f)):
            shutil.copy(os.path.join(llama, f), out)
    ids = json.load(open(os.path.join(llama, "generation_config.json")))
    torch.manual_seed(0)
    cfg = Qwen2MoeConfig(vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=128, moe_intermediate_size=64,
                         shared_expert_intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
                         max_position_embeddings=512, tie_word_embeddings=False, torch_dtype="bfloat16", **ids)
    Qwen2MoeForCausalLM(cfg).to(torch.bfloat16).save_pretrained(out, safe_serialization=True)


def make_sd(out):
    import torch
    from diffusers import (
        AutoencoderKL,
        DDIMScheduler,
        StableDiffusionPipeline,
        UNet2DConditionModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        block_out_channels=(32, 64),
        layers_per_block=1,
        sample_size=16,
        in_channels=4,
        out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=32,
        attention_head_dim=8,
        norm_num_groups=32,
    )
    vae = AutoencoderKL(
        block_out_channels=[32, 64],
        in_channels=3,
        out_channels=3,
        down_block_types=["DownEncoderBlock2D", "DownEncoderBlock2D"],
        up_block_types=["UpDecoderBlock2D", "UpDecoderBlock2D"],
        latent_channels=4,
        norm_num_groups=32,
        sample_size=32,
    )
    text_cfg = CLIPTextConfig(
        bos_token_id=0,
        eos_token_id=2,
        pad_token_id=1,
        hidden_size=32,
        intermediate_size=37,
        layer_norm_eps=1e-05,
        num_attention_heads=4,
        num_hidden_layers=2,
        vocab_size=1000,
        max_position_embeddings=77,
        projection_dim=32,
    )
    text_encoder = CLIPTextModel(text_cfg)

    # CLIP BPE tokenizer built offline: byte-level single characters plus a few
    # merges, vocab capped at the text encoder's vocab_size.
    chars = _bytes_to_unicode()
    vocab_list = ["<|startoftext|>", "<|padding|>", "<|endoftext|>"]
    vocab_list += chars + [c + "</w>" for c in chars]
    merges = []
    for w in "photo astronaut riding horse cat dog red blue the of an a".split():
        cur = list(w[:-1]) + [w[-1] + "</w>"]
        while len(cur) > 1:
            pair = (cur[0], cur[1])
            if pair not in merges:
                merges.append(pair)
            if pair[0] + pair[1] not in vocab_list:
                vocab_list.append(pair[0] + pair[1])
            cur = [pair[0] + pair[1]] + cur[2:]
    assert len(vocab_list) <= 1000, len(vocab_list)
    tokenizer = CLIPTokenizer(
        vocab={t: i for i, t in enumerate(vocab_list)},
        merges=merges,
        bos_token="<|startoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|padding|>",
        unk_token="<|endoftext|>",
        model_max_length=77,
    )

    scheduler = DDIMScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=False,
        set_alpha_to_one=False,
        steps_offset=1,
    )
    pipe = StableDiffusionPipeline(
        unet=unet,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.save_pretrained(out, safe_serialization=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--only", choices=["llm", "sd", "vllm"])
    a = ap.parse_args()
    t0 = time.time()
    if a.only in (None, "llm"):
        make_llama(os.path.join(a.outdir, "tiny-llama"))
        make_moe(os.path.join(a.outdir, "tiny-qwen2moe"), os.path.join(a.outdir, "tiny-llama"))
        print(f"tiny-llama and tiny-qwen2moe written ({time.time() - t0:.1f}s)")
    if a.only in (None, "sd"):
        t1 = time.time()
        make_sd(os.path.join(a.outdir, "tiny-sd"))
        print(f"tiny-sd written ({time.time() - t1:.1f}s)")
    if a.only == "vllm":
        make_llama(os.path.join(a.outdir, "tiny-llama-vllm"), hidden=128, heads=2, kv_heads=2)
        print(f"tiny-llama-vllm written ({time.time() - t0:.1f}s)")
    print(f"make_models total {time.time() - t0:.1f}s -> {a.outdir}")


if __name__ == "__main__":
    sys.exit(main())
