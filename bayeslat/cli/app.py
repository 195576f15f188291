"""The typer application and the error boundary every verb shares.

Each verb is a module ``bayeslat.cli.<verb>`` exposing ``command``; it parses options, calls the
stage that does the work and prints. Verb modules import heavy libraries (PyMC, ArviZ) inside
``command`` so that ``bayeslat --help`` stays fast.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import warnings

import typer
from rich.console import Console
from rich.markup import escape

from bayeslat.errors import COMMAND_LINE, BayeslatError, InputError
from bayeslat.version import __version__

# In the order of the data flow; add a verb here and in README.md.
VERBS = ("simulate", "ingest", "fit", "validate", "decide", "theory", "report")

err_console = Console(stderr=True)

app = typer.Typer(
    name="bayeslat",
    help="Bayesian latency models for speculative decoding under load: posterior speedup "
    "bands, break-even RPS* and best draft length k* from GuideLLM sweeps of vLLM.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"bayeslat {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """Bayesian latency models for speculative decoding under load."""


def flags(fn) -> dict[str, str]:
    """Each option of a verb's function by its parameter name, as its flag: the first long
    name it declares, else typer's own (``verifier_params`` → ``--verifier-params``)."""
    from typer.models import OptionInfo

    out = {}
    for name, param in inspect.signature(fn, eval_str=True).parameters.items():
        infos = [param.default, *getattr(param.annotation, "__metadata__", ())]
        info = next((i for i in infos if isinstance(i, OptionInfo)), None)
        if info is None:
            continue
        decls = [d for d in info.param_decls or () if d.startswith("--")]
        out[name] = decls[0] if decls else "--" + name.replace("_", "-")
    return out


def guarded(fn):
    """Turn a :class:`BayeslatError` into one red line on stderr and its exit status.

    The library names a wrong value by its parameter (``field='alpha'``); on the command line
    the user gave an option, so the line names that (``--alpha``). A field of a file (a key of
    a metadata file, a column of a table) keeps its name."""
    options = flags(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except BayeslatError as exc:
            if (isinstance(exc, InputError) and exc.path in (None, COMMAND_LINE)
                    and exc.field in options):  # not a field of a file
                exc = type(exc)(exc.detail, exc.path, options[exc.field])
            err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False,
                              soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None

    return wrapper


for _verb in VERBS:
    _module = importlib.import_module(f"bayeslat.cli.{_verb}")
    app.command(name=_verb)(guarded(_module.command))


def main() -> None:
    """Entry point of the ``bayeslat`` console script."""
    # The fits compile through numba (nutpie) and the models have no BLAS-heavy ops, so
    # PyTensor's advice to install BLAS through conda is noise to a user.
    warnings.filterwarnings("ignore", message="PyTensor could not link to a BLAS")
    app(prog_name="bayeslat")
