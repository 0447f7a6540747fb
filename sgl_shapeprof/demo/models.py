"""The demo's tiny models, with random weights (`sgl-shapeprof demo` runs all
of this file; the tests and benchmarks run the same models, on other
devices and sizes through the parameters).

A Llama-style decoder (RMSNorm, rotary embeddings, grouped-query attention
with a KV cache, SwiGLU) run as one prefill pass and several decode passes,
and a UNet-style denoiser run for N steps per pass like a diffusion pipeline.
Nothing is downloaded. Passes are marked on `marker`, anything with
start_forward_pass(phase) / end_forward_pass() (a ShapeProfiler, or None).
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Iterator, List, Optional

import torch
import torch.nn.functional as F
from torch import nn


@contextlib.contextmanager
def _pass(marker, phase: Optional[str]) -> Iterator[None]:
    if marker is None:
        yield
        return
    marker.start_forward_pass(phase)
    try:
        yield
    finally:
        marker.end_forward_pass()


# --------------------------------------------------------------------------
# Llama-style decoder
# --------------------------------------------------------------------------
@dataclass
class LlamaConfig:
    vocab: int = 256
    dim: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 128
    max_seq: int = 64
    eps: float = 1e-5


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * self.weight


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.c = c
        self.head_dim = c.dim // c.heads
        self.qkv = nn.Linear(c.dim, (c.heads + 2 * c.kv_heads) * self.head_dim, bias=False)
        self.o = nn.Linear(c.heads * self.head_dim, c.dim, bias=False)

    def forward(self, x, cos, sin, cache_k, cache_v, pos: int):
        b, t, _ = x.shape
        hd, nh, nkv = self.head_dim, self.c.heads, self.c.kv_heads
        q, k, v = self.qkv(x).split([nh * hd, nkv * hd, nkv * hd], dim=-1)
        q = q.view(b, t, nh, hd).transpose(1, 2)
        k = k.view(b, t, nkv, hd).transpose(1, 2)
        v = v.view(b, t, nkv, hd).transpose(1, 2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        cache_k[:, :, pos:pos + t] = k
        cache_v[:, :, pos:pos + t] = v
        keys = cache_k[:, :, :pos + t].repeat_interleave(nh // nkv, dim=1)
        vals = cache_v[:, :, :pos + t].repeat_interleave(nh // nkv, dim=1)
        out = F.scaled_dot_product_attention(q, keys, vals, is_causal=t > 1)
        return self.o(out.transpose(1, 2).reshape(b, t, nh * hd))


class Block(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.attn_norm = RMSNorm(c.dim, c.eps)
        self.attn = Attention(c)
        self.mlp_norm = RMSNorm(c.dim, c.eps)
        self.gate_up = nn.Linear(c.dim, 2 * c.ffn, bias=False)
        self.down = nn.Linear(c.ffn, c.dim, bias=False)

    def forward(self, x, cos, sin, cache_k, cache_v, pos: int):
        x = x + self.attn(self.attn_norm(x), cos, sin, cache_k, cache_v, pos)
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class TinyLlama(nn.Module):
    def __init__(self, c: Optional[LlamaConfig] = None):
        super().__init__()
        self.c = c = c or LlamaConfig()
        self.embed = nn.Embedding(c.vocab, c.dim)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.dim, c.eps)
        self.lm_head = nn.Linear(c.dim, c.vocab, bias=False)
        hd = c.dim // c.heads
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        freqs = torch.outer(torch.arange(c.max_seq).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def new_cache(self, batch: int) -> List[torch.Tensor]:
        c = self.c
        shape = (batch, c.kv_heads, c.max_seq, c.dim // c.heads)
        w = self.embed.weight
        return [torch.zeros(shape, dtype=w.dtype, device=w.device) for _ in range(2 * c.layers)]

    def forward(self, ids: torch.Tensor, cache: List[torch.Tensor], pos: int) -> torch.Tensor:
        t = ids.shape[1]
        x = self.embed(ids)
        cos = self.cos[pos:pos + t].to(x.dtype)
        sin = self.sin[pos:pos + t].to(x.dtype)
        for i, blk in enumerate(self.blocks):
            x = blk(x, cos, sin, cache[2 * i], cache[2 * i + 1], pos)
        return self.lm_head(self.norm(x[:, -1:]))


def make_llama(dtype: torch.dtype = torch.float32, seed: int = 0,
               config: Optional[LlamaConfig] = None, device: str = "cpu") -> TinyLlama:
    torch.manual_seed(seed)
    return TinyLlama(config).to(device=device, dtype=dtype).eval()


def run_llama(model: TinyLlama, marker=None, batch: int = 2, prompt_len: int = 16,
              decode_steps: int = 4, seed: int = 0) -> torch.Tensor:
    """One prefill pass, then decode_steps decode passes; returns the tokens."""
    gen = torch.Generator().manual_seed(seed)
    device = model.embed.weight.device
    ids = torch.randint(0, model.c.vocab, (batch, prompt_len), generator=gen).to(device)
    cache = model.new_cache(batch)
    with _pass(marker, "prefill"):
        logits = model(ids, cache, 0)
        tok = logits.argmax(-1)
    out = [tok]
    pos = prompt_len
    for _ in range(decode_steps):
        with _pass(marker, "decode"):
            logits = model(tok, cache, pos)
            tok = logits.argmax(-1)
        out.append(tok)
        pos += 1
    return torch.cat(out, dim=1)


# --------------------------------------------------------------------------
# UNet-style denoiser
# --------------------------------------------------------------------------
def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([args.cos(), args.sin()], dim=-1)


class ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, tdim: int):
        super().__init__()
        self.n1 = nn.GroupNorm(4, cin)
        self.c1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.t = nn.Linear(tdim, cout)
        self.n2 = nn.GroupNorm(4, cout)
        self.c2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb):
        h = self.c1(F.silu(self.n1(x)))
        h = h + self.t(temb)[:, :, None, None]
        h = self.c2(F.silu(self.n2(h)))
        return self.skip(x) + h


class SpatialAttention(nn.Module):
    def __init__(self, ch: int, ctx_dim: int):
        super().__init__()
        self.norm = nn.GroupNorm(4, ch)
        self.q = nn.Linear(ch, ch)
        self.kv = nn.Linear(ctx_dim, 2 * ch)
        self.o = nn.Linear(ch, ch)

    def forward(self, x, ctx):
        b, c, h, w = x.shape
        tokens = self.norm(x).flatten(2).transpose(1, 2)
        k, v = self.kv(ctx).chunk(2, dim=-1)
        out = F.scaled_dot_product_attention(self.q(tokens), k, v)
        return x + self.o(out).transpose(1, 2).reshape(b, c, h, w)


class TinyUNet(nn.Module):
    def __init__(self, ch: int = 16, tdim: int = 32, ctx_dim: int = 24):
        super().__init__()
        self.tdim = tdim
        self.temb = nn.Sequential(nn.Linear(tdim, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.inp = nn.Conv2d(4, ch, 3, padding=1)
        self.down1 = ResBlock(ch, ch, tdim)
        self.pool = nn.Conv2d(ch, 2 * ch, 3, stride=2, padding=1)
        self.down2 = ResBlock(2 * ch, 2 * ch, tdim)
        self.mid_attn = SpatialAttention(2 * ch, ctx_dim)
        self.up = ResBlock(3 * ch, ch, tdim)
        self.out = nn.Conv2d(ch, 4, 3, padding=1)

    def forward(self, x, t, ctx):
        temb = self.temb(timestep_embedding(t, self.tdim))
        h1 = self.down1(self.inp(x), temb)
        h2 = self.mid_attn(self.down2(self.pool(h1), temb), ctx)
        up = F.interpolate(h2, scale_factor=2.0, mode="nearest")
        return self.out(self.up(torch.cat([up, h1], dim=1), temb))


def make_unet(dtype: torch.dtype = torch.float32, seed: int = 0, device: str = "cpu") -> TinyUNet:
    torch.manual_seed(seed)
    return TinyUNet().to(device=device, dtype=dtype).eval()


def run_diffusion(model: TinyUNet, marker=None, passes: int = 1, steps: int = 50,
                  batch: int = 1, size: int = 16, seed: int = 0) -> torch.Tensor:
    """passes requests, each a pass of `steps` denoising steps (DDIM-like)."""
    gen = torch.Generator().manual_seed(seed)
    dtype, device = model.inp.weight.dtype, model.inp.weight.device
    ctx = torch.randn(batch, 8, 24, generator=gen).to(device, dtype)
    alphas = torch.linspace(0.999, 0.01, steps)
    x = None
    for _ in range(passes):
        with _pass(marker, "denoise"):
            x = torch.randn(batch, 4, size, size, generator=gen).to(device, dtype)
            for i in reversed(range(steps)):
                t = torch.full((batch,), i, dtype=torch.int64, device=device)
                eps = model(x, t, ctx)
                a = float(alphas[i])
                x = (x - (1 - a) ** 0.5 * eps) / a ** 0.5
    return x
