"""The ``bayeslat`` command line: a thin typer layer, one module per verb."""

from bayeslat.cli.app import app, main

__all__ = ["app", "main"]
