"""`python -m tpwarden.cluster.cli` == `tpwarden`."""

from tpwarden.cluster.cli import app

app(prog_name="tpwarden")
