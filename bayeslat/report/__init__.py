"""Self-contained HTML reports of fitted models (``bayeslat report``).

One module per section; :func:`build` assembles them in :data:`SECTIONS` order into one page
(:mod:`bayeslat.report.page`) whose figures and styles are embedded, so it opens in any browser
with no network. It opens with the answer (:mod:`bayeslat.report.answer`: per setup, SD on or
off, which k, how sure), then the evidence, first the model's adequacy
(:mod:`bayeslat.adequacy`). Every section is about the first model given; with several models
the diagnostics section adds their PSIS-LOO comparison. A fit that did not converge is refused
(:func:`bayeslat.fitting.require_converged`) unless allowed, and then named at the top.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from bayeslat.files import atomic_output
from bayeslat.version import __version__

# Section ids, in page order (each is a module of this package with a ``section`` function).
SECTIONS = ("answer", "adequacy", "latency", "data", "collapse", "coefficients", "ratios",
            "speedup", "kstar", "diagnostics", "limits")


def _names(paths: Sequence[Path]) -> list[str]:
    """File names, or the paths as given where two files share a name."""
    names = [p.name for p in paths]
    return names if len(set(names)) == len(names) else [str(p) for p in paths]


def _load(fits: Sequence, say: Callable[[str], None]) -> dict:
    """The fits by name: files loaded (named after the file), models as given (named after
    their file if they were saved, else their variant)."""
    from bayeslat import fitting

    paths = [Path(f) if isinstance(f, str | os.PathLike) else Path(
        getattr(f, "path", None) or f"{f.variant} fit") for f in fits]
    models = {}
    for name, fit, path in zip(_names(paths), fits, paths, strict=True):
        if isinstance(fit, str | os.PathLike):
            say(f"loading {path}")
            fit = fitting.load(path)
        models[name] = fit
    return models


def build(fits: Sequence, seed: int = 0,
          status: Callable[[str], None] | None = None,
          allow_unconverged: bool = False, rps=None, alpha=None,
          jobs: int | None = None) -> str:
    """The HTML report of ``fits``: files written by ``bayeslat fit``, or fitted models.

    Parameters
    ----------
    fits
        One or more fits (paths or :class:`~bayeslat.models.base.LatencyModel`); the first is
        the one reported on, all are compared by PSIS-LOO.
    seed
        Seed of the thinning of draws, of the draws for unmeasured groups and of the
        adequacy check's scatter (the same figures as ``bayeslat fit --seed``).
    status
        Optional callable taking a one-line message about the current step.
    allow_unconverged
        Report on fits that did not converge (else :class:`~bayeslat.errors.FitError`); the
        page then says so at the top.
    rps, alpha
        Loads (req/s) and acceptance rates at which the page opens with its answer
        (:mod:`bayeslat.report.answer`); None: each setup's measured loads and its middle
        measured acceptance rate.
    jobs
        Processes that analyse the setups' decisions and draw the sections (:func:`draw`);
        None: one per core.

    Raises
    ------
    FitError
        A fit did not converge and ``allow_unconverged`` is false.
    """
    from bayeslat import fitting
    from bayeslat.report import inputs as inp
    from bayeslat.report import page

    say = status or (lambda message: None)
    models, unconverged = _load(fits, say), {}
    for name, model in models.items():
        diag = fitting.require_converged(model, allow_unconverged)
        if not diag.converged:
            unconverged[name] = "; ".join(diag.problems())
    data = inp.Inputs(models, seed=seed, jobs=jobs)
    data.unconverged = unconverged
    say("checking the fit against its data, predicting latency and the decisions")
    data.predict(rps, alpha)
    sections = draw(data, say, jobs)
    model = data.model
    kept = data.thin.posterior
    total = model.posterior
    meta = [f"Model: {data.name} (variant {model.variant}), fitted to {len(model.table)} "
            f"benchmarks; data hash {model.data_hash[:12]}.",
            f"Figures and tables use {kept.sizes['chain'] * kept.sizes['draw']} of "
            f"{total.sizes['chain'] * total.sizes['draw']} posterior draws (chosen at random, "
            f"seed {seed}). Made by bayeslat {__version__}."]
    if len(models) > 1:
        meta.append("Compared with: " + ", ".join(list(models)[1:]) + " (see Diagnostics).")
    return page.render(f"bayeslat report: {data.name}", meta, sections, alerts(data))


def draw(data, say: Callable[[str], None], jobs: int | None = None) -> list:
    """Every section of :data:`SECTIONS` drawn from ``data`` (:class:`inputs.Inputs`), in that
    order.

    The figures are most of a report's time and the sections are independent, so they are
    drawn by ``jobs`` processes (None: one per core; :func:`bayeslat.parallel.fork_map`)
    forked after the predictions, which they inherit unpickled, the slowest first
    (:data:`DRAW_ORDER`).
    """
    from bayeslat import parallel

    order = [sid for sid in DRAW_ORDER if sid in SECTIONS] + [
        sid for sid in SECTIONS if sid not in DRAW_ORDER]
    say(f"drawing the sections ({parallel.jobs_for(jobs, len(order))} processes)")
    drawn = dict(zip(order, parallel.fork_map(_section, order, data, jobs), strict=True))
    return [drawn[sid] for sid in SECTIONS]


# The sections' drawing time on the example, slowest first (the order draw hands them out).
DRAW_ORDER = ("speedup", "kstar", "coefficients", "ratios", "collapse", "latency",
              "diagnostics", "adequacy")


def _section(sid: str, data):
    """Section ``sid`` drawn from ``data``, with :data:`page.RC`."""
    import importlib

    from matplotlib import rc_context

    from bayeslat.report import page

    with rc_context(page.RC):
        return importlib.import_module(f"bayeslat.report.{sid}").section(data)


def alerts(data) -> list[str]:
    """What the reader must see before anything else: fits that did not converge, and
    whether the model failed its adequacy check."""
    out = [f"The fit {name} did not converge ({why}): every band, probability and decision "
           "below may be wrong. Refit with more --tune and --draws before acting on this "
           "report." for name, why in data.unconverged.items()]
    if data.check is not None and data.check.warnings:
        out.append(f"The model misfits its data ({len(data.check.warnings)} adequacy "
                   "warning(s)): read the adequacy section before the decisions.")
    return out


def write(fits: Sequence, output: str | os.PathLike, *,
          overwrite: bool = False, seed: int = 0,
          status: Callable[[str], None] | None = None,
          allow_unconverged: bool = False, rps=None, alpha=None,
          jobs: int | None = None) -> Path:
    """Build the report of ``fits`` (paths or models, :func:`build`) and write it to
    ``output`` atomically.

    An existing ``output`` is an error unless ``overwrite``; it is checked before the
    (minute-long) build starts. ``allow_unconverged``, ``rps``, ``alpha``, ``jobs``: see
    :func:`build`.
    """
    with atomic_output(output, overwrite=overwrite) as tmp:
        tmp.write_text(build(fits, seed=seed, status=status,
                             allow_unconverged=allow_unconverged, rps=rps, alpha=alpha,
                             jobs=jobs),
                       encoding="utf-8")
    return Path(output)


def save_figures(report_path: str | os.PathLike, folder: str | os.PathLike,
                 overwrite: bool = False) -> list[Path]:
    """Write every figure of a report as a PNG in ``folder``, named after its alt text
    (``universal-collapse.png``, ...), to show them elsewhere (the README)."""
    from bayeslat.report import page

    out = []
    for alt, png in page.images(Path(report_path).read_text(encoding="utf-8")):
        path = Path(folder) / f"{page.slug(alt)}.png"
        with atomic_output(path, overwrite=overwrite) as tmp:
            tmp.write_bytes(png)
        out.append(path)
    return out
