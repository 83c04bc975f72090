"""The `interlock` command."""

from __future__ import annotations

import typer

from . import __version__

app = typer.Typer(no_args_is_help=True, help="Durable human-in-the-loop requests for AI agents.")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"interlock {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """Ask a person, get a validated answer."""


def main() -> None:
    app()
