"""Run a probe with one kernel file's source patched (this process only):
python patched.py FILE OLD NEW [OLD NEW ...] PROBE.py -- the probe sees runtime.source(FILE) with
each OLD replaced by its NEW."""

import runpy
import sys

from metrale.cuda import runtime

cu_file, *pairs, probe = sys.argv[1:]
subs = list(zip(pairs[0::2], pairs[1::2], strict=True))
src = runtime.source


def patched(f: str) -> str:
    text = src(f)
    if f == cu_file:
        for old, new in subs:
            assert old in text, f"{old!r} not in {cu_file}"
            text = text.replace(old, new)
    return text


runtime.source = patched
patched(cu_file)
sys.argv = [probe]
runpy.run_path(probe, run_name="__main__")
