"""What the docs must say of each integration the registry lists (shared by
tests/test_docs.py and tests/test_new_integration.py): its folder in
docs/how-it-works.md's code map, each of its door prefixes as an operation
name in docs/FORMAT.md (`<prefix>:`), and every server in docs/cli.md's
synopsis of run (`--server a|b`). The integrations are read in a child
process from the package on its path (the installed one, or a copy)."""
import json
import os
import re
import subprocess
import sys
import tempfile

LIST = ("import json\nfrom sgl_shapeprof.integrations import registry\n"
        "print(json.dumps([{'name': s.name, 'kind': s.kind, 'door_prefixes': list(s.door_prefixes)} "
        "for s in registry.seams()]))\n")


def integrations(path=None):
    """[{name, kind, door_prefixes}] of the registry, as the package on
    `path` (a folder holding sgl_shapeprof/; default: the installed one) has it."""
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = str(path) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", LIST], capture_output=True, text=True, timeout=120,
                       cwd=tempfile.gettempdir(), env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def undocumented(docs, found):
    """One line per fact of `found` (integrations()) that the docs folder
    `docs` does not say."""
    def read(name):
        with open(os.path.join(docs, name), encoding="utf-8") as f:
            return f.read()
    code_map, fmt, cli = read("how-it-works.md"), read("FORMAT.md"), read("cli.md")
    out = []
    for i in found:
        if not re.search(rf"^\s+{re.escape(i['name'])}/\s", code_map, re.M):
            out.append(f"how-it-works.md: the code map has no integrations/{i['name']}/")
        out += [f"FORMAT.md: no operation `{p}:...` ({i['name']}'s door)" for p in i["door_prefixes"]
                if f"`{p}:" not in fmt]
    servers = "|".join(i["name"] for i in found if i["kind"] == "server")
    if f"run --server {servers} " not in cli:
        out.append(f"cli.md: run's synopsis does not say --server {servers}")
    return out
