"""Where SGLang looks for a kernel config file, and which one it finds
(`sgl-shapeprof tune`): the file names, the config roots and their Triton
version folders, the device name, and the lookup.

The naming and the dtype string are SGLang's own functions
(`fused_moe_triton_config.get_config_file_name`, `get_config_dtype_str`),
called with the device name set (`SGLangNaming`), never copied here. Without
SGLang importable, files in a directory of the user's are matched by the
fields their names spell (`parse_file_name`): enough to say covered or not,
not to name a missing file.
"""
from __future__ import annotations

import os
import re
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from .moe import DtypeStr, Lookup, MoeKey
from ...records import untrusted

_FIELD = re.compile(r"(?:^|,)([A-Za-z_]+)=(\[[^\]]*\]|[^,]*)")


def name_fields(name: str) -> Optional[Dict[str, str]]:
    """The fields a config file's name spells (E=8,N=64,device_name=...),
    with "down" for a `_down` file; None for a name that is not one."""
    if not name.endswith(".json"):
        return None
    stem = name[:-5]
    down = stem.endswith("_down")
    if down:
        stem = stem[:-5]
    f = dict(_FIELD.findall(stem))
    if down:
        f["down"] = "True"
    return f


def block_field(f: Dict[str, str]) -> Optional[Tuple[int, int]]:
    """The block shape a file name's fields spell (block_shape=[128, 128]), or None."""
    nums = [int(x) for x in re.findall(r"\d+", f.get("block_shape", ""))]
    return (nums[0], nums[1]) if len(nums) == 2 else None


def parse_file_name(name: str) -> Optional[Tuple[MoeKey, str, bool]]:
    """(key, device, down) from a fused-MoE config file's name, or None: how
    files in a user's folder are matched when SGLang is not importable."""
    f = name_fields(name)
    try:
        e, n = int(f["E"]), int(f["N"])  # type: ignore[index]
    except (TypeError, KeyError, ValueError):
        return None
    assert f is not None
    return (MoeKey(e, n, f.get("dtype") or None, block_field(f), f.get("per_channel_quant") == "True"),
            f.get("device_name", ""), "down" in f)


def version_folders(root: str) -> List[Tuple[str, str]]:
    """(version, folder) for root/configs/triton_X_Y_Z, newest first."""
    base = os.path.join(root, "configs")
    try:
        names = [d for d in os.listdir(base) if d.startswith("triton_")]
    except OSError:
        return []
    out = []
    for d in names:
        v = d[len("triton_"):].replace("_", ".")
        if all(p.isdigit() for p in v.split(".")):
            out.append((v, os.path.join(base, d)))
    return sorted(out, key=lambda x: tuple(int(p) for p in x[0].split(".")), reverse=True)


def search_order(root: str, triton: Optional[str]) -> List[Tuple[Optional[str], str]]:
    """The folders SGLang's get_moe_configs reads under a config root: the
    running Triton's folder first, then the others newest first. A root
    without configs/triton_* folders is one flat folder (a user's)."""
    vs = version_folders(root)
    if not vs:
        return [(None, root)]
    first = [x for x in vs if x[0] == triton]
    return first + [x for x in vs if x[0] != triton]


def device_names(roots: Iterable[str]) -> List[str]:
    """The device names config files under these roots are tuned for."""
    names = set()
    for root in roots:
        for _, folder in search_order(root, None):
            try:
                files = os.listdir(folder)
            except OSError:
                continue
            for f in files:
                fields = name_fields(f)
                if fields and fields.get("device_name"):
                    names.add(fields["device_name"])
    return sorted(names)


def resolve_device(given: str, known: List[str]) -> str:
    """The device name as config files spell it (spaces as _): the name
    given, or the one known name it is the end of (H200 -> NVIDIA_H200).
    ValueError when it is the end of several."""
    name = given.strip().replace(" ", "_")
    if name in known:
        return name
    low = name.lower()
    hits = [k for k in known if k.lower() == low or k.lower().endswith("_" + low)]
    if len(hits) == 1:
        return hits[0]
    if len(hits) > 1:
        raise ValueError(f"--device {given} names several devices the configs know: {', '.join(hits)}")
    return name


class Naming:
    """How a key becomes the file looked for: without SGLang, no name, and
    a file matches when the fields its name spells are the key's."""

    def __init__(self, device: str) -> None:
        self.device = device

    def name(self, key: MoeKey, down: bool = False) -> Optional[str]:
        return None

    def matches(self, file_name: str, key: MoeKey, expected: Optional[str], down: bool = False) -> bool:
        if expected is not None:
            return file_name == expected
        p = parse_file_name(file_name)
        return p is not None and p[2] == down and p[0] == key and p[1] == self.device


class SGLangNaming(Naming):
    """SGLang's own get_config_file_name, with get_device_name answering
    the device asked about."""

    def __init__(self, device: str, module: object) -> None:
        super().__init__(device)
        self.module = module

    def name(self, key: MoeKey, down: bool = False) -> Optional[str]:
        mod = self.module
        saved = getattr(mod, "get_device_name")
        setattr(mod, "get_device_name", lambda *a, **k: self.device)
        try:
            block = list(key.block_shape) if key.block_shape else None
            return str(getattr(mod, "get_config_file_name")(key.e, key.n, key.dtype, block,
                                                            key.per_channel_quant, down_moe=down))
        finally:
            setattr(mod, "get_device_name", saved)


def installed_triton() -> Optional[str]:
    """This environment's Triton version (what SGLang would run), or None."""
    try:
        from importlib.metadata import PackageNotFoundError, version
        try:
            return version("triton")
        except PackageNotFoundError:
            return None
    except ImportError:
        return None


def sglang_config_module() -> Optional[object]:
    """SGLang's fused_moe_triton_config module, or None when SGLang (or
    what it imports: torch, triton) is not importable."""
    try:
        from sglang.srt.layers.moe.moe_runner.triton_utils import fused_moe_triton_config as mod
    except Exception:  # ImportError, or SGLang failing to import on this machine
        return None
    return mod


def sglang_config_root(mod: object) -> str:
    """Where SGLang reads its MoE configs (get_moe_configs):
    `SGLANG_MOE_CONFIG_DIR`, else the folder its module is in."""
    return os.environ.get("SGLANG_MOE_CONFIG_DIR") or os.path.dirname(
        os.path.realpath(str(getattr(mod, "__file__"))))


def sglang_dtype_str(mod: object) -> "DtypeStr":
    """SGLang's own get_config_dtype_str, over a record's dtype name."""
    import torch

    def dtype_str(hidden_dtype: str, flags: Dict[str, bool]) -> Optional[str]:
        dt = getattr(torch, hidden_dtype, None)
        if not isinstance(dt, torch.dtype):
            dt = torch.bfloat16
        return getattr(mod, "get_config_dtype_str")(dt, **flags)  # type: ignore[no-any-return]
    return dtype_str


def tuned_ms(path: str) -> List[int]:
    """The M keys of a config file, in file order."""
    try:
        with open(path, encoding="utf-8") as f:
            table = untrusted.loads(f.read())
        if not isinstance(table, dict):
            raise ValueError("not an object of M -> kernel config")
        return [int(x) for x in table]
    except (OSError, ValueError, TypeError) as e:
        raise ValueError(f"{path}: not a kernel config file ({e})") from None


def lookup(key: MoeKey, roots: List[str], triton: Optional[str], naming: Naming, down: bool = False) -> Lookup:
    """The file SGLang would read for key: the roots in order (a user's
    folder, then SGLang's), in each the running Triton's folder first, then
    the other versions newest first. down: the `_down` file SGLang also
    looks for, for the second (down-projection) GEMM."""
    expected = naming.name(key, down)
    out = Lookup(expected)
    for root in roots:
        for version, folder in search_order(root, triton):
            out.searched.append(folder)
            try:
                files = sorted(os.listdir(folder))
            except OSError:
                continue
            hit = next((f for f in files if naming.matches(f, key, expected, down)), None)
            if hit is None:
                continue
            path = os.path.join(folder, hit)
            out.path, out.version, out.tuned = path, version, tuned_ms(path)
            out.other_version = version is not None and triton is not None and version != triton
            if out.name is None:
                out.name = hit
            return out
    return out


def sglang_block_gemm_root() -> Optional[str]:
    """The folder SGLang reads block-GEMM configs from (get_w8a8_block_fp8_configs:
    beside its fp8_kernel module), or None when SGLang is not importable."""
    try:
        from sglang.kernels.ops.gemm import fp8_kernel
    except Exception:
        return None
    return os.path.join(os.path.dirname(os.path.realpath(str(fp8_kernel.__file__))), "configs")


def sglang_default_config(mod: object) -> Callable[..., Optional[Dict[str, int]]]:
    """SGLang's own get_default_config (None where it cannot answer here).
    It asks the server's published context whether deterministic inference
    is on (then one fixed config): tune asks for a server without it,
    SGLang's default, as SGLangNaming answers the device."""
    import types
    context = types.SimpleNamespace(deterministic=types.SimpleNamespace(enable_deterministic_inference=False))

    def default(*args: object) -> Optional[Dict[str, int]]:
        saved = getattr(mod, "get_exec", None)
        try:
            if saved is not None:
                setattr(mod, "get_exec", lambda: context)
            return dict(getattr(mod, "get_default_config")(*args))
        except Exception:  # a release whose get_default_config needs more of its server
            return None
        finally:
            if saved is not None:
                setattr(mod, "get_exec", saved)
    return default
