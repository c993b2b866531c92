"""``python -m metrale.bench``: the same as ``metrale bench``."""

import sys

from metrale.bench.run import main

sys.exit(main(prog="python -m metrale.bench"))
