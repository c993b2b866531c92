"""Run a probe with one kernel file's source patched (this process only):
python patched.py FILE OLD NEW PROBE.py -- the probe sees runtime.source(FILE) with OLD replaced."""

import runpy
import sys

from metrale.cuda import runtime

cu_file, old, new, probe = sys.argv[1:5]
src = runtime.source
runtime.source = lambda f: src(f).replace(old, new) if f == cu_file else src(f)
assert old in src(cu_file), f"{old!r} not in {cu_file}"
sys.argv = [probe]
runpy.run_path(probe, run_name="__main__")
