"""The control channel's files: requests to an armed process (`sgl-shapeprof
request PID`) and its replies, in a folder only this user can use. The
armed process looks for a request at pass starts (Mailbox.poll: at most one
failed open() per POLL_EVERY, nothing per operator) and answers in a reply
file. Whatever a request file holds gets a reply; nothing in it ever raises
into the model's pass.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Any, Callable, Optional

from ..records import untrusted
from .messages import say
from .requests import RequestError, request_count, request_flag
from .switch import env_setting

ENV_CONTROL_DIR = "SGLANG_PROFILE_SHAPES_CONTROL_DIR"


def control_dir(create: bool = False) -> str:
    """Where request and reply files go: $SHAPEPROF_CONTROL_DIR (or
    $SGLANG_PROFILE_SHAPES_CONTROL_DIR), or
    <tmp>/sgl_shapeprof-<uid>. It must be ours and closed to others (0700):
    a request names a file to write, so nobody else may plant one."""
    name, value = env_setting(ENV_CONTROL_DIR) or (ENV_CONTROL_DIR, "")
    d = value or os.path.join(tempfile.gettempdir(), f"sgl_shapeprof-{os.getuid()}")
    where = f"{name}={value!r}: " if value else ""
    bad = f"{where}control folder {d} must be a directory owned by this user with mode 0700"
    if create:
        try:
            os.makedirs(d, mode=0o700, exist_ok=True)
        except FileExistsError:  # something else by that name
            raise RequestError(bad) from None
        except OSError as e:
            raise RequestError(f"{where}cannot create control folder {d}: {e.strerror or e}") from None
    st = os.lstat(d)  # FileNotFoundError: nobody has sent a request
    if not os.path.isdir(d) or os.path.islink(d) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise RequestError(bad)
    return d


def put_new(path: str, tmp_suffix: str, obj: object) -> None:
    """obj as JSON at path, whole or not at all: written to a file of our
    own beside it (created exclusively, never through a link, 0600), then
    renamed into place. OSError when it cannot be."""
    tmp = f"{path}.{tmp_suffix}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f)
    os.rename(tmp, path)


class Mailbox:
    """This process's request file, looked for at pass starts."""

    # A request from outside waits at most this long for a pass start to
    # look for it; looking costs a failed open() (~3 us), so not every pass.
    POLL_EVERY = 0.1

    def __init__(self) -> None:
        self._file: Optional[str] = None
        self._said = False  # an unusable control folder was said
        self._next_poll = 0.0

    def poll(self, answer: Callable[[bytes], dict]) -> None:
        """At most one failed open() per POLL_EVERY: a request for this
        process? Its reply is answer(its bytes), or one line if that raised."""
        now = time.monotonic()
        if now < self._next_poll:
            return
        self._next_poll = now + self.POLL_EVERY
        if self._file is None:
            try:
                folder = control_dir()
            except RequestError as e:  # there, but not private: not taken while so
                if not self._said:
                    self._said = True
                    say(f"{e}; requests from outside the process are not taken")
                return
            except OSError:
                return  # no private folder (yet): nobody has sent a request
            self._file = os.path.join(folder, f"{os.getpid()}.request")
        try:
            with open(self._file, "rb") as f:
                data = f.read(65536)
        except FileNotFoundError:
            return
        except OSError as e:
            say(f"cannot read {self._file}: {e}")
            return
        unlink_quietly(self._file)
        try:
            reply = answer(data)
        except Exception as e:  # a request file is untrusted: never into the model's pass
            reply = {"id": None, "ok": False, "message": f"request not taken: {type(e).__name__}: {e}"}
        _write_reply(os.path.dirname(self._file), reply)


def answer(prof: Any, data: bytes) -> dict:
    """The reply to a request file's bytes, acted on prof (an
    OnRequestProfiler): one line for anything it cannot take."""
    try:
        msg = untrusted.loads(data)
        if not isinstance(msg, dict):
            raise ValueError("not a JSON object")
    except ValueError as e:
        return {"id": None, "ok": False, "message": f"unreadable request: {e}"}
    rid = msg.get("id")
    rid = rid if isinstance(rid, (str, int)) and not isinstance(rid, bool) else None
    try:
        phases = msg.get("phases")
        if phases is not None and not isinstance(phases, str) and not (
                isinstance(phases, list) and all(isinstance(p, str) for p in phases)):
            raise ValueError(f"phases {phases!r}: a name or a list of names")
        if msg.get("action") == "stop":
            path = prof.stop()
            return {"id": rid, "ok": True, "records_file": path,
                    "message": f"stopped; records in {path}" if path else "nothing was recording"}
        if msg.get("action") == "start":
            path = prof.request(passes=request_count("passes", msg.get("passes")), phases=phases,
                                output=msg.get("output"), skip=request_count("skip", msg.get("skip")),
                                time=request_flag("time", msg.get("time")),
                                nvtx=request_flag("nvtx", msg.get("nvtx")))
            return {"id": rid, "ok": True, "records_file": path,
                    "message": f"recording {msg.get('passes') or 'all'} passes of rank {prof.rank} "
                               f"into {path}"}
        if msg.get("action") == "status":
            return {"id": rid, "ok": True, "message": json.dumps(prof.status())}
        return {"id": rid, "ok": False, "message": f"unknown action {msg.get('action')!r}"}
    except (RequestError, ValueError, TypeError) as e:
        return {"id": rid, "ok": False, "message": str(e)}


def _write_reply(folder: str, reply: dict) -> None:
    rid = str(reply.get("id") or "none")
    if not rid.replace("-", "").isalnum():
        rid = "none"
    try:
        put_new(os.path.join(folder, f"{os.getpid()}.reply.{rid}"), "tmp", reply)
    except OSError as e:
        say(f"cannot answer a request in {folder}: {e}")


def send(pid: int, message: dict, timeout: float = 30.0) -> Optional[dict]:
    """Writes a request for process pid and waits for its reply (None when
    none came within timeout: the process takes requests at pass starts)."""
    import uuid
    folder = control_dir(create=True)
    rid = uuid.uuid4().hex
    message = dict(message, id=rid)
    req = os.path.join(folder, f"{pid}.request")
    if os.path.exists(req):
        raise RequestError(f"process {pid} has not taken its last request yet ({req})")
    put_new(req, f"{rid}.tmp", message)
    reply_path = os.path.join(folder, f"{pid}.reply.{rid}")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(reply_path) as f:
                reply = json.load(f)
            os.unlink(reply_path)
            return reply
        except FileNotFoundError:
            pass
        except ValueError:
            pass  # being renamed into place
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            unlink_quietly(req)
            raise RequestError(f"no process {pid}") from None
        except PermissionError:
            pass
        time.sleep(0.05)
    return None


def unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
