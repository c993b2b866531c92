"""``python -m metrale``: the ``metrale`` command line."""

from metrale.cli import app

app(prog_name="metrale")
