"""Fitting a sweep: the run, its convergence, the headline, and reading fits back.

:func:`run` is what ``bayeslat fit`` does: read a sweep table, build a model variant, sample it
to the convergence bar (:mod:`bayeslat.models.sampling`), write one netCDF file atomically and
summarise each configuration. :func:`load` reads such a file back into a model ready to
predict; :func:`convergence` and :func:`require_converged` say whether to trust it.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from bayeslat import theory
from bayeslat.data import schema
from bayeslat.errors import FitError
from bayeslat.models import DEFAULT, get
from bayeslat.models.base import FORMAT, prepare, read_fit
from bayeslat.models.sampling import (
    ESS_MARGIN,
    FIRST_CHECK,
    MAX_RHAT,
    MIN_ESS,
    TUNE,
    Diagnostics,
    diagnostics,
    sample,
)
from bayeslat.scaling import ScalingConfig

EXAMPLE = Path("data/example/sweep.parquet")
REQUIRED_ATTRS = ("bayeslat_format", "variant", "config", "priors", "feature_scales",
                  "data_hash", "fit_data_hash", "sampler", "bayeslat_version")


def sampler_line(idata) -> str:
    """One line on how a fit was sampled: chains against cores, tuning and draws, and why
    sampling stopped where it did."""
    info = json.loads(idata.posterior.attrs.get("sampler", "{}"))
    if "chains" not in info:
        return "sampler: not recorded"
    cores = f" on {info['cores']} cores" if "cores" in info else ""
    line = (f"sampler: {info['sampler']}, {info['chains']} chains{cores}, {info['tune']} tuning "
            f"steps and {info['draws']} draws each")
    if "max_draws" not in info:
        return line
    if info.get("stopped") == "divergences":
        return (f"{line}: stopped at the first divergent transitions, which no number of draws "
                "removes (a funnel: sample the coefficients named in the slowest-mixing "
                "variables non-centred, 'noncentered' in a --config file, or try another variant)")
    if info["draws"] < info["max_draws"]:
        return (f"{line}: stopped where the bar held (R-hat <= {MAX_RHAT}, ESS >= "
                f"{ESS_MARGIN * MIN_ESS:.0f}, no divergences; checked from {FIRST_CHECK} draws)")
    return f"{line}: the most allowed (the bar did not hold earlier)"


def likelihood_line(idata) -> str:
    """One line on the likelihood a fit sampled and the time it took (compile, sampling)."""
    info = json.loads(idata.posterior.attrs.get("sampler", "{}"))
    times = ", ".join(f"{name} {info[key]:.1f} s" for name, key in (
        ("compile", "compile_s"), ("sampling", "sample_s")) if key in info)
    times = f"; {times}" if times else ""
    if info.get("likelihood") == "summary":
        return (f"likelihood: {info['summarised_curves']} curve summaries and "
                f"{info['exact_rows']} exact rows (stage-1 nu {info['summary_nu']:.3g}){times}")
    return f"likelihood: every row ({info.get('why', 'exact')}){times}"


def headline(model, seed: int = 0) -> pd.DataFrame:
    """Per SD configuration: zero-load speedup and RPS* (median, 90% interval, P(exists)).

    Both from the configuration's ``C1``, ``C2`` and its group's baseline ``(k = 0)``, via
    :mod:`bayeslat.theory`; for the capacity variants RPS* is the first crossing of the
    latencies with the compute wall ``C3``, ``Q`` (:func:`bayeslat.theory.break_even_rps`).
    For ``moe`` these are the full-coverage coefficients.
    """
    rows = model.rows
    sd = rows[rows["k"] > 0].drop_duplicates("config").assign(rps=0.0)
    base = sd.assign(k=0, alpha=np.nan, method="none", drafter="none", drafter_params_b=0.0)
    if model.per_configuration:  # only groups whose baseline was measured
        ok = model.known(prepare(base))
        sd, base = sd[ok], base[ok]
    if sd.empty:
        return pd.DataFrame(columns=["config", "speedup0", "speedup0_lo", "speedup0_hi",
                                     "rps_star", "rps_star_lo", "rps_star_hi", "p_break_even"])
    pred = model.predict(pd.concat([sd, base], ignore_index=True), seed=seed)
    n = len(sd)
    first, second = {"obs": slice(0, n)}, {"obs": slice(n, 2 * n)}

    def split(part):  # (SD, baseline) draws of one part; scalars (no such part) as they are
        if not isinstance(part, xr.DataArray):
            return part, part
        return part.isel(first), part.isel(second).assign_coords(obs=part.obs[:n].values)

    (c1_sd, c1_d), (c2_sd, c2_d) = (split(v) for v in full_coefficients(pred))
    (c3_sd, c3_d), (q_sd, q_d) = (split(v) for v in capacity_terms(pred))
    speed0 = 1.0 / theory.ratios(c1_d, c2_d, c1_sd, c2_sd)[0]
    star = theory.break_even_rps(c1_d, c2_d, c1_sd, c2_sd, c3_d, q_d, c3_sd, q_sd)
    q = [0.05, 0.5, 0.95]
    s_q = speed0.quantile(q, dim=("chain", "draw")).values
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no break-even in any draw: NaN
        r_q = star.quantile(q, dim=("chain", "draw"), skipna=True).values
    return pd.DataFrame({
        "config": sd["config"].to_numpy(),
        "speedup0": s_q[1], "speedup0_lo": s_q[0], "speedup0_hi": s_q[2],
        "rps_star": r_q[1], "rps_star_lo": r_q[0], "rps_star_hi": r_q[2],
        "p_break_even": star.notnull().mean(("chain", "draw")).values,
    })


def agreement(model, reference, seed: int = 0) -> pd.DataFrame:
    """How close a fit's posterior is to a reference fit's of the same data, per measured
    configuration: for ``C1``, ``C2`` (at zero load) and, per SD configuration, the zero-load
    speedup and RPS* (:func:`headline`), ``z``, the distance of the medians in the
    reference's posterior sd (its 90% interval over 3.29), and ``width``, the ratio of the 90%
    intervals. The check of the curve summaries against the exact likelihood."""
    rows = reference.table.drop_duplicates(list(schema.CONFIG_COLUMNS)).assign(rps=0.0)
    out = {}
    for name, m in (("model", model), ("reference", reference)):
        pred = m.predict(rows, seed=seed)
        q = {part: pd.DataFrame(pred[part].quantile([0.05, 0.5, 0.95], ("chain", "draw")).values.T,
                                index=schema.config_labels(rows).to_numpy(),
                                columns=["lo", "mid", "hi"]) for part in ("C1", "C2")}
        head = headline(m, seed).set_index("config")
        for stat, col in (("speedup0", "speedup0"), ("rps_star", "rps_star")):
            q[stat] = head[[f"{col}_lo", col, f"{col}_hi"]].set_axis(["lo", "mid", "hi"], axis=1)
        out[name] = pd.concat(q, names=["quantity", "config"])
    a, b = out["model"], out["reference"].reindex(out["model"].index)
    with np.errstate(invalid="ignore", divide="ignore"):
        return pd.DataFrame({"z": (a["mid"] - b["mid"]).abs() / ((b["hi"] - b["lo"]) / 3.29),
                             "width": (a["hi"] - a["lo"]) / (b["hi"] - b["lo"])})


def full_coefficients(pred: xr.Dataset):
    """``(C1, C2)`` draws from predicted parts; for ``moe``, at full coverage (``phi = 1``)."""
    if "C1" in pred:
        return pred["C1"], pred["C2"]
    return pred["C1u"] + pred["C1s"], pred["C2u"] + pred["C2s"]


def capacity_terms(pred: xr.Dataset):
    """``(C3, Q)`` draws of the compute wall from predicted parts; ``(0.0, 0.0)`` for the
    variants without it (the paper's model), so that :mod:`bayeslat.theory` takes its closed
    forms."""
    if "C3" in pred and "Q" in pred:
        return pred["C3"], pred["Q"]
    return 0.0, 0.0


# Fields of the diagnostics stored with a fit (posterior attr ``diagnostics``, JSON).
_DIAGNOSTICS_ATTR = "diagnostics"


def _diagnostics_json(diag: Diagnostics) -> str:
    """The diagnostics as the JSON stored in a fit's posterior attrs (NaN kept as NaN)."""
    return json.dumps({"max_rhat": diag.max_rhat, "min_ess_bulk": diag.min_ess_bulk,
                       "min_ess_tail": diag.min_ess_tail, "divergences": int(diag.divergences),
                       "seconds": diag.seconds, "converged": bool(diag.converged),
                       "max_rhat_limit": MAX_RHAT, "min_ess_limit": MIN_ESS})


def convergence(model) -> Diagnostics:
    """The convergence diagnostics of a fitted model.

    Read from the ``diagnostics`` attr that :func:`run` stores in the posterior; computed with
    :func:`diagnostics` for files written without it (older fits, or fits saved directly with
    :meth:`~bayeslat.models.base.LatencyModel.save`).
    """
    if not model.fitted:
        raise FitError("the model is not fitted; call fit() or bayeslat.load() first")
    stored = model.posterior.attrs.get(_DIAGNOSTICS_ATTR)
    if stored:
        try:
            d = json.loads(stored)
            return Diagnostics(max_rhat=float(d["max_rhat"]),
                               min_ess_bulk=float(d["min_ess_bulk"]),
                               min_ess_tail=float(d["min_ess_tail"]),
                               divergences=int(d["divergences"]),
                               seconds=float(d.get("seconds", float("nan"))))
        except (ValueError, KeyError, TypeError):
            pass  # unreadable: compute them again
    return diagnostics(model.idata)


def require_converged(model, allow: bool) -> Diagnostics:
    """The model's :func:`convergence`; raise :class:`FitError` if it did not converge, unless
    ``allow``.

    Parameters
    ----------
    model
        A fitted model (from :func:`load`).
    allow
        Return the diagnostics of an unconverged fit instead of raising (the CLI's
        ``--allow-unconverged``); the caller must then say that the fit did not converge.

    Returns
    -------
    The :class:`Diagnostics`; check ``.converged`` when ``allow`` is true.
    """
    diag = convergence(model)
    if not diag.converged and not allow:
        where = getattr(model, "path", None)
        raise FitError(f"{where + ': ' if where else ''}the fit did not converge "
                       f"({'; '.join(diag.problems())}), so what it says may be wrong: refit "
                       "with more --tune and --draws, or pass --allow-unconverged to use it "
                       "anyway")
    return diag


@dataclass
class FitResult:
    """What :func:`run` produced."""

    model: object
    diagnostics: Diagnostics
    headline: pd.DataFrame
    path: Path


def run(data: str | os.PathLike | None = None, variant: str = DEFAULT, *,
        output: str | os.PathLike | None = None, config: str | os.PathLike | None = None,
        draws: int | None = None, tune: int = TUNE, chains: int | None = None, seed: int = 0,
        sampler: str = "nutpie", overwrite: bool = False, progressbar: bool = True,
        status=None, exact: bool = False) -> FitResult:
    """Fit ``variant`` to the sweep table ``data`` and write the fit to ``output``.

    Parameters
    ----------
    data
        A Parquet sweep table; the shipped example when None.
    output
        The netCDF file to write; ``models/<data name>-<variant>.nc`` when None. An existing
        file is an error unless ``overwrite``.
    config
        A TOML or JSON file overriding the scaling design and priors.
    draws, chains
        None: sized to the machine and the convergence bar (:func:`sample`).
    status
        Optional callable taking a one-line message about the current phase.
    exact
        Sample every row's likelihood, not the curve summaries (:func:`sample`).
    """
    say = status or (lambda message: None)
    data = Path(data) if data is not None else EXAMPLE
    if not data.exists() and data == EXAMPLE:
        raise FitError(f"the shipped example {EXAMPLE} is missing; run from the project root "
                       "or give a sweep table")
    output = Path(output) if output is not None else Path("models") / f"{data.stem}-{variant}.nc"
    if output.exists() and not overwrite:
        raise FitError(f"{output}: the file exists; pass --overwrite to replace it or choose "
                       "another name with -o")
    cfg = ScalingConfig.load(config) if config is not None else None  # the variant's default
    say(f"reading {data}")
    model = get(variant)(schema.read_table(data), cfg)
    say(f"building and compiling the {variant} model ({len(model.rows)} rows)")
    start = time.perf_counter()
    idata = sample(model, draws=draws, tune=tune, chains=chains, seed=seed, sampler=sampler,
                   progressbar=progressbar, exact=exact)
    diag = diagnostics(idata, time.perf_counter() - start)
    # stored with the fit, so that decide and report can refuse an unconverged one
    idata.posterior.attrs[_DIAGNOSTICS_ATTR] = _diagnostics_json(diag)
    say(f"writing {output}")
    model.save(output, overwrite=overwrite)
    say("summarising each configuration")
    return FitResult(model=model, diagnostics=diag, headline=headline(model, seed), path=output)


def load(path: str | os.PathLike):
    """A fitted model from a file written by ``bayeslat fit``, ready to predict.

    Checks that the file is a bayeslat fit of a known variant and format and that its stored
    training data match their hash. The model's ``path`` is the file's; its convergence is
    :func:`convergence` (and :func:`require_converged` refuses an unconverged one).
    """
    path = Path(path)
    if not path.is_file():
        raise FitError(f"{path}: no such file; give a fit written by 'bayeslat fit'")
    try:
        groups = read_fit(path)
    except Exception as exc:  # h5py and xarray raise several unrelated types
        raise FitError(f"{path}: not a readable fit ({type(exc).__name__}: {exc}); give a "
                       "file written by 'bayeslat fit'") from exc
    attrs = dict(groups["posterior"].attrs) if "posterior" in groups else {}
    missing = [k for k in REQUIRED_ATTRS if k not in attrs] + [
        g for g in ("posterior", "fit_data") if g not in groups]
    if missing:
        raise FitError(f"{path}: not a bayeslat fit (missing {', '.join(missing)}); give a "
                       "file written by 'bayeslat fit'")
    if str(attrs["bayeslat_format"]) != str(FORMAT):
        raise FitError(f"{path}: fit format {attrs['bayeslat_format']}, this bayeslat reads "
                       f"format {FORMAT}; refit with this version")
    model = get(attrs["variant"]).from_file(path, groups)
    model.path = str(path)
    return model
