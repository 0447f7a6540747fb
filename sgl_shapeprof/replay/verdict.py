"""The end of a repro script: run the call, compare what happened with the
record, print one line and exit with a status that says which.

`sgl-shapeprof repro` copies this module's source into every script it
writes (after tensors.py's), so it imports only the standard library and
torch, and nothing of sgl_shapeprof.
"""
import sys

import torch

# Exit statuses (`repro --run` reads them).
REPRODUCED = 0      # raised the recorded exception; or returned the recorded outputs
OTHER_ERROR = 1     # raised something the record does not say
DID_NOT_RAISE = 2   # the record says it raised (or crashed the process); it returned
OTHER_OUTPUTS = 3   # returned outputs of other shapes or dtypes than recorded


def describe(value):
    """Outputs as a record spells them: a tensor's shape and dtype, a list
    per list or tuple, None for anything else (None if nothing is a tensor)."""
    def one(v):
        if isinstance(v, torch.Tensor):
            return {"shape": list(v.shape), "dtype": str(v.dtype)}
        if isinstance(v, (list, tuple)):
            return [one(x) for x in v]
        return None
    out = one(value)
    if isinstance(out, list) and isinstance(value, tuple) and all(x is None for x in out):
        return None
    return out


def _first_line(text):
    return str(text).strip().split("\n", 1)[0]


def verdict(call, error=None, outputs=None, crashed=False, device=None):
    """Runs call(); returns (exit status, the line that says what happened).
    error: the recorded (type name, message), or None if it returned;
    outputs: the recorded outputs; crashed: the process died in this call."""
    try:
        result = call()
        if device is not None and str(device).startswith("cuda"):
            torch.cuda.synchronize(device)  # an asynchronous failure is this call's
    except Exception as e:  # noqa: BLE001 -- any exception is the answer
        got = f"{type(e).__name__}: {_first_line(e)}"
        if error is None:
            said = "crashed the process" if crashed else "returned"
            return OTHER_ERROR, f"raised something else: {got} (recorded: it {said})"
        if type(e).__name__ == error[0] and str(e) == error[1]:
            return REPRODUCED, f"reproduced: {got}"
        if type(e).__name__ == error[0] and _first_line(e) == _first_line(error[1]):
            return REPRODUCED, f"reproduced: {got} (the message differs after its first line)"
        return OTHER_ERROR, f"raised something else: {got} (recorded: {error[0]}: {_first_line(error[1])})"
    if error is not None:
        return DID_NOT_RAISE, f"did not raise (recorded: {error[0]}: {_first_line(error[1])})"
    if crashed:
        return DID_NOT_RAISE, "did not crash: it returned (recorded: the process died in this call)"
    got = describe(result)
    if outputs is not None and got != outputs:
        return OTHER_OUTPUTS, f"outputs differ: {got} (recorded: {outputs})"
    return REPRODUCED, "ran as recorded" + (f": outputs {got}" if got is not None else "")


def main(call, error=None, outputs=None, crashed=False, device=None):
    status, line = verdict(call, error, outputs, crashed, device)
    print(line)
    sys.stdout.flush()
    return status
