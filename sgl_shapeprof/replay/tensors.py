"""Tensors laid out as recorded: shape, strides, storage offset, dtype,
device, and values made one of a few ways.

The one maker of input tensors for replay (replay/inputs.py) and for the
scripts `sgl-shapeprof repro` writes, which carry this module's source
verbatim: so it imports nothing but torch and the standard library, and
nothing of sgl_shapeprof.
"""
import torch

ALIGN_BYTES = 4096  # a storage offset is kept modulo this: the alignment is what a kernel
                    # sees, and a slice of a huge pool would need all of the pool

# How values are made (fill):
#   normal    N(0, 1) (the default for floating-point and complex tensors)
#   randint   integers in [0, high)
#   outside   integers in [high, 2 * high): every one out of range of a dim of size high
#   bool      random booleans
#   nonzero   exactly `high` nonzero elements, the rest zero
#   sorted    normal values, sorted along the last dim
#   offsets   sorted integers from 0 up to high, the first 0 (embedding_bag's offsets)
FILLS = ("normal", "randint", "outside", "bool", "nonzero", "sorted", "offsets")


def dtype_of(name):
    """torch.float16 for "torch.float16" (ValueError if this torch has none)."""
    d = getattr(torch, name[6:], None) if name.startswith("torch.") else None
    if not isinstance(d, torch.dtype):
        raise ValueError(f"dtype {name} is not in this torch ({torch.__version__})")
    return d


def contiguous_stride(shape):
    out, n = [], 1
    for s in reversed(shape):
        out.append(n)
        n *= max(s, 1)
    return out[::-1]


def storage_layout(shape, stride, offset, dtype):
    """(elements of storage, storage offset) a tensor of this layout needs;
    the offset kept modulo ALIGN_BYTES."""
    offset = int(offset or 0) % max(1, ALIGN_BYTES // dtype.itemsize)
    if any(n == 0 for n in shape):
        return offset, offset
    return offset + 1 + sum((n - 1) * s for n, s in zip(shape, stride)), offset


def _values(fill, high, n, dtype, device):
    """n values for a 1-D storage."""
    if fill in ("normal", "sorted"):
        draw = dtype if dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64) or \
            dtype.is_complex else torch.float32  # float8 and others: no randn of their own
        return torch.randn(n, dtype=draw, device=device).to(dtype)
    if fill == "bool":
        return (torch.rand(n, device=device) < 0.5).to(dtype)
    if fill in ("randint", "outside"):
        low, top = (0, high) if fill == "randint" else (high, 2 * max(high, 1))
        if not dtype.is_floating_point and dtype != torch.bool:
            top = min(top, torch.iinfo(dtype).max + 1)
            low = min(low, top - 1)
        return torch.randint(low, top, (n,), device=device).to(dtype)
    return torch.zeros(n, dtype=dtype, device=device)  # nonzero, offsets: set on the view


def tensor(shape, dtype, stride=None, offset=0, device="cpu", fill="normal", high=0):
    """A tensor of this shape, dtype ("torch.float16" or torch.float16),
    strides and storage offset on device, its values made by fill (FILLS)."""
    if fill not in FILLS:
        raise ValueError(f"fill {fill!r} is not one of {', '.join(FILLS)}")
    dtype = dtype_of(dtype) if isinstance(dtype, str) else dtype
    shape = list(shape)
    stride = contiguous_stride(shape) if stride is None else list(stride)
    n, offset = storage_layout(shape, stride, offset, dtype)
    t = _values(fill, high, n, dtype, device).as_strided(shape, stride, offset)
    if fill == "nonzero":
        flat = torch.zeros(t.numel(), dtype=dtype, device=device)
        flat[torch.randperm(t.numel(), device=device)[:high]] = 1
        t.copy_(flat.view(t.shape))
    elif fill == "sorted" and t.dim():
        t.copy_(t.sort(-1).values)
    elif fill == "offsets":
        t.copy_(torch.randint(0, high + 1, t.shape, device=device).sort().values)
        t[:1] = 0
    return t
