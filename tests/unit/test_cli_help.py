"""Every command's --help carries an example, and --help works for all of them."""

from tpwarden.cluster.cli import app
from typer.main import get_command
from typer.testing import CliRunner


def _commands(cmd, path=()):
    subs = getattr(cmd, "commands", None)
    if subs:
        for name, sub in subs.items():
            yield from _commands(sub, (*path, name))
    else:
        yield path, cmd


def test_every_command_has_an_example():
    missing = [
        " ".join(p) for p, cmd in _commands(get_command(app)) if "Example" not in (cmd.help or "")
    ]
    assert not missing, f"commands without an example: {missing}"


def test_help_renders_for_every_command():
    runner = CliRunner()
    for path, _ in _commands(get_command(app)):
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "Example" in result.output, path
