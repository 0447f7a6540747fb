"""`sgl-shapeprof tune`: which of the fused-MoE (and block-quantized GEMM)
kernel configs a run needed are tuned for a device, which M each call falls
back to, the lists SGLang's tuner takes, and the CUDA-graph batch sizes the
decode passes suggest. One module per concern:

- moe.py: fused-MoE config keys, from the records' calls, and the tuner's
  command line;
- configs.py: SGLang's config-file naming, the folders it searches, the
  lookup;
- blocks.py: block-quantized GEMMs (Triton w8a8, DeepGEMM);
- coverage.py: the share of calls on tuned configs, and the per-M table;
- launches.py: the config each fused-MoE kernel launch ran;
- graphs.py: CUDA-graph batch sizes;
- result.py: the whole question, for the command and the report.

TunableOp's side is analysis/tunableop.py; the output (text, JSON, CSV) is
the render/ layer's. The names below are what the rest of the package and
the tests import from `analysis.tune`.
"""
from .blocks import BLOCK_GEMM_OPS, DEEPGEMM_OPS, BlockKey, block_uses, lookup_block
from .configs import (Naming, SGLangNaming, block_field, device_names, installed_triton, lookup, name_fields,
                      parse_file_name, resolve_device, search_order, sglang_block_gemm_root,
                      sglang_config_module, sglang_config_root, sglang_default_config, sglang_dtype_str,
                      tuned_ms, version_folders)
from .coverage import CSV_FIELDS, PhaseCoverage, coverage, csv_rows
from .graphs import GRAPH_FAMILY, GraphSize, GraphSizes, graph_sizes, padding_waste
from .launches import CONFIG, KERNEL, MoeLaunch, expect, is_moe_launch, moe_launches
from .moe import (DTYPE_FLAGS, MOE_OPS, NO_PHASE, TUNER, DtypeStr, Lookup, MoeKey, MoeUse, as_tensor,
                  block_from_scale, count_call, moe_key_of, moe_uses, phase_group, plain_dtype_str,
                  tuner_command)
from .result import NEEDS, TuneResult, tune_result

__all__ = [
    "BLOCK_GEMM_OPS", "DEEPGEMM_OPS", "BlockKey", "block_uses", "lookup_block",
    "Naming", "SGLangNaming", "block_field", "device_names", "installed_triton", "lookup", "name_fields",
    "parse_file_name", "resolve_device", "search_order", "sglang_block_gemm_root", "sglang_config_module",
    "sglang_config_root", "sglang_default_config", "sglang_dtype_str", "tuned_ms", "version_folders",
    "CSV_FIELDS", "PhaseCoverage", "coverage", "csv_rows",
    "GRAPH_FAMILY", "GraphSize", "GraphSizes", "graph_sizes", "padding_waste",
    "CONFIG", "KERNEL", "MoeLaunch", "expect", "is_moe_launch", "moe_launches",
    "DTYPE_FLAGS", "MOE_OPS", "NO_PHASE", "TUNER", "DtypeStr", "Lookup", "MoeKey", "MoeUse", "as_tensor",
    "block_from_scale", "count_call", "moe_key_of", "moe_uses", "phase_group", "plain_dtype_str",
    "tuner_command",
    "NEEDS", "TuneResult", "tune_result",
]
