"""What a request to record may say, checked the same way wherever it comes
from (SGLang's and vLLM's /start_profile, a request file, the Python API):
its names are names, its counts whole numbers. Requests come from outside
the process: untrusted.
"""
from __future__ import annotations

from .config import INT_MAX


class RequestError(ValueError):
    """A request that cannot be taken; str() says why in one line."""


NAME_LIMIT = 100  # bytes: a request's name part of a file name


def request_name(what: str, value: object) -> str:
    """A request's part of a file name (SGLang's profile_id and
    profile_prefix, vLLM's profile_prefix): a name, never a path; else
    RequestError in one line. Requests come over HTTP: untrusted."""
    name = str(value)
    size = len(name.encode("utf-8", "surrogatepass"))
    if not name or "/" in name or "\\" in name or ".." in name or size > NAME_LIMIT \
            or any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise RequestError(f"{what} {name[:40]!r}{'...' if len(name) > 40 else ''} is not a name: no '/', "
                           f"'..', NUL or control characters, at most {NAME_LIMIT} bytes")
    return name


def request_count(what: str, value: object) -> int:
    """A request's number of passes or steps (0 or None: not given): a whole
    number, 0 or more; else RequestError in one line."""
    v = 0 if value is None else value
    if type(v) is not int or v < 0:
        raise RequestError(f"{what} {v!r} is not a whole number (0 or more)")
    if v > INT_MAX:
        raise RequestError(f"{what} {v!r} is too large (at most {INT_MAX})")
    return v


def request_flag(what: str, value: object):
    """A request's switch: true, false, or None (not given: the armed
    profiler's setting); else RequestError in one line."""
    if value is not None and not isinstance(value, bool):
        raise RequestError(f"{what} {value!r} is not true or false")
    return value
