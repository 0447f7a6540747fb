"""The whole tuned-config question, for the `tune` command and the report:
every fused-MoE and block-GEMM config the calls needed, looked up for a
device, and the config each fused-MoE kernel launch ran."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ...records.signature import Signature
from ..kernel_calls import MoeGroup, moe_groups
from .blocks import DEEPGEMM_OPS, block_uses, deep_gemm_uses, lookup_block
from .configs import (Naming, SGLangNaming, device_names, installed_triton, lookup, resolve_device,
                      sglang_block_gemm_root, sglang_config_module, sglang_config_root, sglang_default_config,
                      sglang_dtype_str)
from .coverage import PhaseCoverage, coverage
from .launches import MoeLaunch, expect, moe_launches
from .moe import Lookup, MoeKey, MoeUse, moe_uses, plain_dtype_str

NEEDS = ("needs SGLang importable (its config file naming and shipped configs: pip install sglang), "
         "or --configs DIR (your files, matched by the fields their names spell)")


@dataclass
class TuneResult:
    device: str
    triton: Optional[str]
    sglang: bool                 # SGLang's own naming was used
    roots: List[str]             # fused-MoE config roots, in lookup order
    gemm_folders: List[str]      # block-GEMM config folders, in lookup order
    moe: List[MoeUse]
    block: List[MoeUse]          # keys are BlockKey
    deepgemm: List[MoeUse] = field(default_factory=list)  # keys are BlockKey; nothing to look up
    deep_gemm_kernels: List[MoeUse] = field(default_factory=list)  # DeepGEMM's own calls: DeepGemmKey
    launches: List[MoeLaunch] = field(default_factory=list)  # fused-MoE kernel launches, with their configs
    library_moe: List[MoeGroup] = field(default_factory=list)  # kernel libraries' fused MoE (FlashInfer's)

    @property
    def moe_coverage(self) -> Dict[str, PhaseCoverage]:
        return coverage(self.moe)

    @property
    def block_coverage(self) -> Dict[str, PhaseCoverage]:
        return coverage(self.block)


def tune_result(signatures: List[Signature], device: str, configs: Optional[str] = None,
                triton: Optional[str] = None) -> TuneResult:
    """Every fused-MoE and block-GEMM config the calls needed, looked up for
    device. ValueError (one line) when neither SGLang nor configs is there,
    for a device name that is the end of several, or a config file that is
    not one."""
    mod = sglang_config_module()
    roots: List[str] = [configs] if configs else []
    folders: List[str] = [configs] if configs else []
    if mod is not None:
        roots.append(sglang_config_root(mod))
        gemm_root = sglang_block_gemm_root()
        if gemm_root:
            folders.append(gemm_root)
    elif not configs:
        raise ValueError(NEEDS)
    device = resolve_device(device, device_names(roots + folders))
    naming: Naming = SGLangNaming(device, mod) if mod is not None else Naming(device)
    triton = triton or installed_triton()
    moe = moe_uses(signatures, sglang_dtype_str(mod) if mod is not None else plain_dtype_str)
    for u in moe:
        u.lookup = lookup(u.key, roots, triton, naming)
        u.down = lookup(u.key, roots, triton, naming, down=True)
    block = block_uses(signatures)
    for u in block:
        u.lookup = lookup_block(u.key, folders, device)  # type: ignore[arg-type]
    launches = moe_launches(signatures, sglang_dtype_str(mod) if mod is not None else plain_dtype_str)

    def find(e: int, n: int, dtype: Optional[str], block: Optional[Tuple[int, int]], pcq: bool,
             down: bool) -> Lookup:
        return lookup(MoeKey(e, n, dtype, block, pcq), roots, triton, naming, down)
    expect(launches, find, sglang_default_config(mod) if mod is not None else None)
    return TuneResult(device, triton, mod is not None, roots, folders, moe, block,
                      block_uses(signatures, DEEPGEMM_OPS), deep_gemm_uses(signatures), launches,
                      moe_groups(signatures))
