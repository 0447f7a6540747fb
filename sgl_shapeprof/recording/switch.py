"""SGLANG_PROFILE_SHAPES, the on/off switch, and the variables' two
spellings: the one definition of each; which phase names mean one phase
(records/phases.py's aliases). Imports nothing but records/phases.py (which
imports nothing): the start-up hook reads it at Python start-up.

Every variable has a neutral spelling for any server (vLLM, a script):
SHAPEPROF for SGLANG_PROFILE_SHAPES, SHAPEPROF_FILE for
SGLANG_PROFILE_SHAPES_FILE, and so on. Either works; the neutral one is read
when it is set and not empty (config.read_env refuses two that disagree).

The start-up hook's module cannot import even this (it runs in every
Python process, and must not load the package while the variable is unset):
its .pth line is given the names from here when it is installed
(integrations/install.py), and the module spells loads_hook()'s test
itself; tests/test_env.py checks that the two agree on every kind of value.
"""
from ..records.phases import PHASE_ALIASES  # the phases' owner (imports nothing)

ENV_ENABLE = "SGLANG_PROFILE_SHAPES"
ON_REQUEST = "on_request"  # SGLANG_PROFILE_SHAPES=on_request: armed, records when asked

OFF, ON, ARMED = "off", "on", ON_REQUEST


def _environ(environ):
    if environ is None:
        import os  # loaded by the interpreter: free
        return os.environ
    return environ


# every variable's neutral spelling starts with this in place of ENV_ENABLE
NEUTRAL_ENABLE = "SHAPEPROF"


def neutral_name(name: str) -> str:
    """SGLANG_PROFILE_SHAPES_X -> SHAPEPROF_X (the name every server reads)."""
    if name.startswith(ENV_ENABLE):
        return NEUTRAL_ENABLE + name[len(ENV_ENABLE):]
    return name


def env_setting(name: str, environ=None) -> "tuple[str, str] | None":
    """(the spelling read, its value) of the variable `name`: the neutral
    spelling when it is set and not empty, else the SGLang one if set; None
    when neither is."""
    env = _environ(environ)
    neutral = neutral_name(name)
    value = env.get(neutral)
    if value:
        return neutral, value
    value = env.get(name)
    if value is not None:
        return name, value
    return (neutral, "") if neutral in env else None


def env_value(name: str, environ=None, default=None):
    """The value of `name` under either spelling (see env_setting), else default."""
    found = env_setting(name, environ)
    return default if found is None else found[1]


def switch_value(environ=None) -> str:
    return env_value(ENV_ENABLE, environ) or ""


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


def same_phase(a: str, b: str) -> bool:
    """a and b name one phase (equal, or prefill and extend)."""
    return a == b or PHASE_ALIASES.get(a) == b
