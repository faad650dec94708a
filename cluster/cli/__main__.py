"""`python -m cluster.cli` == `servectl`."""

from cluster.cli import app

app(prog_name="servectl")
