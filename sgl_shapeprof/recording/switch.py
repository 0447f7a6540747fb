"""SGLANG_PROFILE_SHAPES, the on/off switch, and the phase names that mean
one phase: the one definition of each. Imports nothing: the start-up hook
reads it at Python start-up.

The start-up hook's .pth line cannot import even this (it runs in every
Python process, and must not load the package while the variable is unset),
so it spells loads_hook()'s test itself; tests/test_layout.py checks that the
two agree on every kind of value.
"""
ENV_ENABLE = "SGLANG_PROFILE_SHAPES"
ON_REQUEST = "on_request"  # SGLANG_PROFILE_SHAPES=on_request: armed, records when asked

OFF, ON, ARMED = "off", "on", ON_REQUEST


def _environ(environ):
    if environ is None:
        import os  # loaded by the interpreter: free
        return os.environ
    return environ


def switch_value(environ=None) -> str:
    return _environ(environ).get(ENV_ENABLE) or ""


def parse_switch(value) -> "str | None":
    """OFF (unset, "", "0"), ON ("1"), ARMED ("on_request"), or None: a bad
    value, which the worker's from_env() names."""
    v = (value or "").strip()
    if v in ("", "0"):
        return OFF
    if v == "1":
        return ON
    if v == ON_REQUEST:
        return ARMED
    return None


def loads_hook(environ=None) -> bool:
    """Whether the start-up hook patches SGLang's modules: the switch is set
    and not off -- a bad value too, so that the worker says what is wrong."""
    return parse_switch(switch_value(environ)) != OFF


def armed_on_request(environ=None) -> bool:
    return parse_switch(switch_value(environ)) == ARMED


# SGLang runs prefill as EXTEND batches: either name selects both.
PHASE_ALIASES = {"prefill": "extend", "extend": "prefill"}


def same_phase(a: str, b: str) -> bool:
    """a and b name one phase (equal, or prefill and extend)."""
    return a == b or PHASE_ALIASES.get(a) == b
