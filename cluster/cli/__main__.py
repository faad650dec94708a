"""`python -m servectl.cluster.cli` == `servectl`."""

from servectl.cluster.cli import app

app(prog_name="servectl")
