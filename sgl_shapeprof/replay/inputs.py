"""Replay's inputs: tensors laid out as recorded, values valid for the
operator (_value_rules), and every other argument -- for anything that
builds a call's inputs from its record."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple
from .calls import (ADVANCED_INDEX_OPS, ALONG_DIM_OPS, LOSS_TARGET_OPS, SMALL_INT_HIGH, Call, Fill,
                    NotReplayable, tensor_specs)



def _value_rules(name: str, call: Call) -> Dict[str, Fill]:
    """Inputs whose values the operator reads as positions, counts or order,
    by input name ("indices[1]" for a list's element): valid for the
    recorded shapes, so that no replay reads out of range."""
    ins, a = call.inputs, call.args or {}

    def shape(n: str) -> Optional[List[int]]:
        v = ins.get(n)
        return v["shape"] if isinstance(v, dict) else None

    def size(n: str, dim: Optional[int]) -> Optional[int]:
        """Input n's size along dim (all its elements when dim is None)."""
        s = shape(n)
        if s is None:
            return None
        if dim is None or not s:
            return math.prod(s)
        return s[dim] if isinstance(dim, int) and -len(s) <= dim < len(s) else None

    rules: Dict[str, Fill] = {}

    def below(n: str, high: Optional[int], why: str) -> None:
        if high is not None and n in ins:
            rules[n] = Fill("randint", max(high, 1), why)

    out = call.outputs.get("shape") if isinstance(call.outputs, dict) else None
    if name == "embedding":
        below("indices", size("weight", 0), "rows of weight")
    elif name == "embedding_bag":
        below("indices", size("weight", 0), "rows of weight")
        if "offsets" in ins and len(shape("indices") or []) == 1:
            rules["offsets"] = Fill("offsets", size("indices", None) or 0, "bags of indices")
    elif name in ALONG_DIM_OPS:
        dim = a.get("dim")
        for n in ("index", "indices"):
            below(n, size("self", dim), f"self's dim {dim}" if dim is not None else "elements of self")
    elif name == "take":
        below("index", size("self", None), "elements of self")
    elif name in ADVANCED_INDEX_OPS and shape("self") is not None:
        reads = name in ("index", "unsafe_index")  # else it writes values into self
        rules.update(_index_rules(shape("self"), ins.get("indices"), out if reads else None,
                                  None if reads else shape("values")))
    elif name in ("nonzero", "argwhere") and out:
        rules["self"] = Fill("nonzero", out[0], "as many as recorded")
    elif name in ("masked_select", "masked_scatter") and shape("mask") is not None:
        # every element of a mask shaped like the call: its true count is known
        full = math.prod(shape("mask")) >= max(size("self", None) or 0, 1)
        want = out and math.prod(out) if name == "masked_select" else size("source", None)
        if full and want is not None:
            rules["mask"] = Fill("nonzero", min(want, math.prod(shape("mask"))), "as many as recorded")
    elif name == "one_hot":
        n = a.get("num_classes")
        below("self", n if isinstance(n, int) and n > 0 else (out[-1] if out else None), "classes")
    elif name in LOSS_TARGET_OPS:
        s = shape("self") or []
        below("target", s[1] if len(s) >= 2 else (s[0] if s else None), "classes of self")
    elif name == "searchsorted":
        rules["sorted_sequence"] = Fill("sorted")
    elif name == "bucketize" and "boundaries" in ins:
        rules["boundaries"] = Fill("sorted")
    return rules


def _index_rules(self_shape: List[int], indices: object, out: Optional[List[int]],
                 values: Optional[List[int]]) -> Dict[str, Fill]:
    """self[indices]: an integer index in bounds of the dim it indexes; a
    mask, which covers as many dims as it has, with the recorded number of
    true elements when that can be told (one mask, no other index tensor)."""
    if not isinstance(indices, list):
        return {}
    entries = [e if isinstance(e, dict) else None for e in indices]
    masks = [i for i, e in enumerate(entries) if e and e["dtype"] in ("torch.bool", "torch.uint8")]
    lone = len(masks) == 1 and sum(e is not None for e in entries) == 1
    rules: Dict[str, Fill] = {}
    pos = 0
    for i, e in enumerate(entries):
        if e is None:
            pos += 1
        elif i in masks:
            m = len(e["shape"])
            count = None
            if lone and out is not None and pos < len(out):       # index: [..., nnz, rest]
                count = out[pos]
            elif lone and values and len(values) == 1 + len(self_shape) - pos - m:  # index_put
                count = values[0]
            rules[f"indices[{i}]"] = (Fill("nonzero", count, "as many as recorded") if count is not None
                                      else Fill("bool"))
            pos += m
        else:
            high = self_shape[pos] if pos < len(self_shape) else 1
            rules[f"indices[{i}]"] = Fill("randint", max(high, 1), f"self's dim {pos}")
            pos += 1
    return rules


def _dtype(name: str):
    from .tensors import dtype_of
    try:
        return dtype_of(name)
    except ValueError as e:
        raise NotReplayable(str(e)) from None


def _default_fill(dtype, integers: Fill) -> Fill:
    import torch
    if dtype == torch.bool:
        return Fill("bool")
    if dtype.is_floating_point or dtype.is_complex:
        return Fill("normal")
    return integers


def _storage(spec: dict) -> Tuple[int, int]:
    """(storage elements, offset) a tensor of this layout needs."""
    from .tensors import storage_layout
    return storage_layout(spec["shape"], spec["stride"], spec.get("offset"), _dtype(spec["dtype"]))


def _device_of(recorded: str, target: Optional[str]) -> str:
    import torch
    dev = torch.device(target or recorded)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise NotReplayable(f"recorded on {recorded}; this process has no CUDA "
                                "(--device cpu replays it here)")
        if (dev.index or 0) >= torch.cuda.device_count():
            raise NotReplayable(f"no device {dev} here (--device cuda:0 replays it there)")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    return str(dev)


def _arg_value(value: object, typ: str, name: str, target: Optional[str], here: bool = True):
    """A recorded argument as the operator takes it (FORMAT.md spells them);
    a device must exist in this process when here."""
    import torch
    if isinstance(value, dict) and set(value) == {"real", "imag"}:
        return complex(float(value["real"]), float(value["imag"]))
    if isinstance(value, list):
        return [_arg_value(v, typ, name, target, here) for v in value]
    if isinstance(value, str):
        if value in ("inf", "-inf", "nan") and any(t in typ for t in ("float", "number", "Scalar")):
            return float(value)
        if any(t in typ for t in ("ScalarType", "Layout", "MemoryFormat")):
            v = getattr(torch, value[6:], None) if value.startswith("torch.") else None
            if v is None:
                raise NotReplayable(f"argument {name}={value} is not in this torch ({torch.__version__})")
            return v
        if "Device" in typ:
            return torch.device(_device_of(value, target) if here else (target or value))
    return value


@dataclass
class TensorPlan:
    """An input tensor to make: its recorded layout, where, and its values."""
    spec: dict     # shape, dtype, stride, offset as recorded
    device: str
    fill: Fill
    where: str     # the input's name ("indices[1]" for a list's element)


@dataclass
class ArgPlan:
    """One schema argument: a TensorPlan, a list of them (None for an absent
    element), or the value the operator takes; passed by keyword or not."""
    name: str
    value: object
    keyword: bool
    written: bool  # the operator writes it (in place)


@dataclass
class Plan:
    """How one call's arguments are made: what replay runs and repro writes."""
    args: List[ArgPlan]
    synthesised: Dict[str, str]  # input -> how its values were made, where not N(0, 1)
    cuda: Optional[str]          # the CUDA device it runs on, if any
    nbytes: int                  # its input tensors' storage


def about_range(error: Optional[dict]) -> bool:
    """The recorded error is about an index out of range: its values matter."""
    text = f"{(error or {}).get('error_type', '')}: {(error or {}).get('error_message', '')}".lower()
    return any(w in text for w in ("out of range", "out of bounds", "indexerror", "index_out_of",
                                   "device-side assert"))


def plan(op, call: Call, target: Optional[str] = None, max_bytes: Optional[int] = None,
         here: bool = True) -> Plan:
    """How to make call's arguments (on target, else where recorded). here:
    the devices must exist in this process (replay); else they are taken
    as recorded (a script to run elsewhere). A call recorded raising an
    index error gets its index-like inputs out of range: tensor values are
    not recorded, and valid ones would not raise."""
    import torch
    name = call.operation.split(".")[1].strip("_")  # _embedding_bag, index_put_: their families
    rules = _value_rules(name, call)
    if call.error is not None and about_range(call.error):
        rules = {k: Fill("outside", f.high, f"{f.why}: out of range, as the recorded error needs")
                 if f.kind == "randint" else f for k, f in rules.items()}

    def device(recorded: str) -> str:
        return _device_of(recorded, target) if here else (target or recorded)

    specs = [s for v in call.inputs.values() for s in tensor_specs(v)]
    need = sum(_storage(s)[0] * _dtype(s["dtype"]).itemsize for s in specs)
    # a GPU says when its memory runs out; the host may meet the OOM killer instead
    on_cpu = sum(_storage(s)[0] * _dtype(s["dtype"]).itemsize for s in specs
                 if device(s.get("device", "cpu")) == "cpu")
    if max_bytes is not None and on_cpu > max_bytes:
        raise NotReplayable(f"its inputs need {on_cpu / 2**30:.1f} GiB (--max-memory "
                            f"{max_bytes / 2**30:.1f})")
    # other integer inputs: valid indices into any dim of the floating-point inputs
    float_dims = [n for s in specs if _dtype(s["dtype"]).is_floating_point for n in s["shape"] if n > 0]
    integers = (Fill("randint", min(float_dims), "smallest dim of the float inputs") if float_dims
                else Fill("randint", SMALL_INT_HIGH, "no float inputs"))
    p = Plan([], {}, None, need)

    def tensor(spec: dict, where: str) -> TensorPlan:
        fill = rules.get(where) or _default_fill(_dtype(spec["dtype"]), integers)
        if fill.kind != "normal":
            p.synthesised[where] = fill.note
        dev = device(spec.get("device", "cpu"))
        if dev.startswith("cuda"):
            p.cuda = dev
        return TensorPlan(spec, dev, fill, where)

    skipped = False  # after an argument left to its default, the rest go by name
    for arg in op._schema.arguments:
        typ = str(getattr(arg, "real_type", arg.type))
        if arg.name in call.inputs:
            v = call.inputs[arg.name]
            value: object = ([tensor(s, f"{arg.name}[{i}]") if isinstance(s, dict) else None
                              for i, s in enumerate(v)] if isinstance(v, list) else tensor(v, arg.name))
            written = arg.alias_info is not None and arg.alias_info.is_write and not arg.is_out
        elif call.args is not None and arg.name in call.args:
            value, written = _arg_value(call.args[arg.name], typ, arg.name, target if here else None,
                                        here), False
            if isinstance(value, torch.device) and value.type == "cuda":
                p.cuda = str(value)
        elif arg.has_default_value():
            skipped = True
            continue
        else:
            value, written = None, False  # an optional tensor not given
        p.args.append(ArgPlan(arg.name, value, arg.kwarg_only or skipped, written))
    return p


@dataclass
class Built:
    """A call's arguments, ready: op(*args, **kwargs)."""
    args: list
    kwargs: dict
    synthesised: Dict[str, str]
    mutated: List[tuple]   # (tensor the op writes, its first values), put back before each run
    cuda: Optional[str]    # the CUDA device it runs on, if any
    nbytes: int            # its input tensors' storage


def make(p: Plan) -> Built:
    """The tensors and arguments a plan says."""
    import torch
    from .tensors import tensor

    def one(t: object):
        if not isinstance(t, TensorPlan):
            return t
        s = t.spec
        return tensor(s["shape"], s["dtype"], s["stride"], s.get("offset"), t.device, t.fill.kind, t.fill.high)

    b = Built([], {}, p.synthesised, [], p.cuda, p.nbytes)
    for a in p.args:
        value = [one(t) for t in a.value] if isinstance(a.value, list) else one(a.value)
        if a.written:
            b.mutated += [(t, t.clone()) for t in (value if isinstance(value, list) else [value])
                          if isinstance(t, torch.Tensor)]
        if a.keyword:
            b.kwargs[a.name] = value
        else:
            b.args.append(value)
    return b


def build(op, call: Call, target: Optional[str] = None, max_bytes: Optional[int] = None) -> Built:
    """Tensors and arguments for one replay of call (on target, else where recorded)."""
    return make(plan(op, call, target, max_bytes))
