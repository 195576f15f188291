"""Fitting a sweep: the sampling run, its convergence, and reading fits back.

:func:`sample_table` is what ``bayeslat fit`` does before it saves: build a model variant on a
sweep table and sample it to the convergence bar (:mod:`bayeslat.models.sampling`), with the
diagnostics stored in the posterior. :func:`load` reads a saved fit back into a model ready to
predict; :func:`convergence` and :func:`require_converged` say whether to trust it. The
public API over these is :mod:`bayeslat.api`.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bayeslat.data import schema
from bayeslat.errors import FitError
from bayeslat.models import DEFAULT, config_of, get, resolve
from bayeslat.models.base import FORMAT, read_fit
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
    if "diverged_at" in info:
        line += (f" (sampled again with smaller steps, target_accept {info['target_accept']}: at "
                 f"{info['diverged_at']} it met a divergence)")
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


def spreads_line(model) -> str:
    """One line naming the coefficients whose spread ``tau`` is fixed, not sampled, because
    their level has fewer units than the ``tau_min_units`` prior (not those the variant always
    fixes); empty where none is."""
    if model.per_configuration:
        return ""
    fixed = [c for c in model.coef_names
             if model.fixed_tau(c) is not None and c not in model.fixed_spread]
    if not fixed:
        return ""
    counts = {dim: len(units) for dim, units in model.units.items()}
    return (f"spreads fixed at tau = {model.fixed_tau(fixed[0]):g}, too few units to estimate them "
            f"({counts['group']} groups, {counts['draft']} drafters; fewer than "
            f"{model.config.prior('tau_min_units')}): {', '.join(fixed)}")


def knees_line(model) -> str:
    """One line with each server's roofline knee of the prefill stall (median [90%], tokens)
    where the fit has knees (the ``prefill_excess`` feature), or with each server's roofline
    (compute per token and knee) for the ``roofline`` variant; empty where it has none."""
    post = getattr(model, "posterior", {})
    if "log_knee" in post:
        f, knee, knee_d = (_quantiles(np.exp(post[name]), scale) for name, scale in
                           (("log_f", 1e6), ("log_knee", 1.0), ("log_knee_d", 1.0)))
        return ("roofline per server, compute a token past the knee (us), the verifier's and "
                "the drafter's knee (tokens), median [90%]: "
                + "; ".join(f"{server} {f[server]}, {knee[server]}, {knee_d[server]}"
                            for server in f))
    if "prefill_knee" not in post:
        return ""
    knee = _quantiles(post["prefill_knee"], 1.0)
    return ("roofline knee of a prefill's stall, tokens (median [90%]): "
            + "; ".join(f"{server} {text}" for server, text in knee.items()))


def _quantiles(draws, scale: float) -> dict[str, str]:
    """``median [5%, 95%]`` of per-server ``draws`` (times ``scale``, 3 digits), by server."""
    q = draws.quantile([0.05, 0.5, 0.95], dim=("chain", "draw")) * scale
    return {server: f"{q.sel(quantile=0.5, server=server):.3g} "
                    f"[{q.sel(quantile=0.05, server=server):.3g}, "
                    f"{q.sel(quantile=0.95, server=server):.3g}]"
            for server in draws["server"].to_numpy()}


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
                       "with more tuning steps and draws (--tune, --draws), or allow an "
                       "unconverged fit (--allow-unconverged; allow_unconverged=True in "
                       "Python) to use it anyway")
    return diag


def unconverged_warning(diag: Diagnostics) -> str:
    """The line every output made from an unconverged fit carries (``diag``: its
    :func:`convergence`)."""
    return (f"the fit did not converge ({'; '.join(diag.problems())}); these results may be "
            "wrong: refit with more tuning steps and draws (--tune, --draws) before relying "
            "on them")


_MISFIT_ATTR = "misfit"


def record_misfit(model, check) -> None:
    """Store in the fit (its posterior attrs, written by the next save) the configurations
    that the adequacy ``check`` (:func:`bayeslat.adequacy.check`) marked misfit, with the share
    of their points inside the 90% predictive interval, for :func:`misfit_warnings`."""
    bad = check.configs[check.configs["misfit"]]
    model.idata.posterior.attrs[_MISFIT_ATTR] = json.dumps(
        dict(zip(bad["config"], bad["inside_90"].astype(float), strict=True)))


def misfit_record(model) -> dict[str, float]:
    """The configurations (labels, :func:`bayeslat.data.schema.config_labels`) the fit's stored
    adequacy check marked misfit, with the share of their points inside the 90% interval
    (:func:`record_misfit`; empty when the fit has no record)."""
    return json.loads(model.posterior.attrs.get(_MISFIT_ATTR, "{}"))


def misfit_warnings(model, setups: pd.DataFrame) -> list[str]:
    """One line per setup of ``setups`` (column ``setup``) with configurations that the fit's
    stored adequacy check marked misfit (:func:`misfit_record`): its decisions rest on curves
    that do not follow those measurements."""
    stored = misfit_record(model)
    out = []
    for setup, group in zip(setups["setup"], schema.group_labels(setups), strict=True):
        baseline = f"{group} k0"
        mine = {label.removeprefix(f"{setup} "): share for label, share in stored.items()
                if label.startswith(f"{setup} ") or label == baseline}
        if mine:
            which = ", ".join(f"{'k0 (no SD)' if label == baseline else label} {share:.0%}"
                              for label, share in mine.items())
            out.append(f"{setup}: the fit misses its own measurements of {which} (points "
                       "inside the 90% band; about 90% expected): the decisions there rest on "
                       "a curve that does not follow them (bayeslat report, adequacy section)")
    return out


def few_groups_hint(model) -> str:
    """What to try when a fit of a pooled variant over too few groups to sample their spreads
    (the ``tau_min_units`` prior) did not converge: a coefficient that few groups barely
    inform can mix slowly centred (benchmarks/README.md, ``few_groups.py``); empty where that
    does not apply."""
    groups = model.rows["group"].nunique()
    if model.per_configuration or groups >= model.config.prior("tau_min_units"):
        return ""
    names = ", ".join(f'"{c}"' for c in model.coef_names)
    return (f"; with {groups} groups, sample the slowest coefficients non-centred (a --config "
            f"file with noncentered = [...], any of {names}) or fit the dense variant")


def sample_table(table: pd.DataFrame, variant: str = DEFAULT, *,
                 config: ScalingConfig | str | os.PathLike | None = None,
                 draws: int | None = None, tune: int = TUNE, chains: int | None = None,
                 seed: int = 0, sampler: str = "nutpie", progressbar: bool = True,
                 status=None, exact: bool = False):
    """Build ``variant`` on the sweep table ``table`` and sample it to the convergence bar.

    What ``bayeslat fit`` and :func:`bayeslat.fit` do before saving: the model's ``idata``
    holds the posterior, and its diagnostics are stored in the posterior's attrs (read back by
    :func:`convergence`, also from a saved file).

    Parameters
    ----------
    table
        A validated sweep table (:func:`bayeslat.data.schema.read_table`).
    variant
        A model variant, or ``auto`` (:func:`bayeslat.models.choose`).
    config
        The scaling design and priors, or a TOML or JSON file of them; None: the variant's.
    draws, chains
        None: sized to the machine and the convergence bar (:func:`sample`).
    status
        Optional callable taking a one-line message about the current phase.
    exact
        Sample every row's likelihood, not the curve summaries (:func:`sample`).

    Returns
    -------
    The fitted :class:`~bayeslat.models.base.LatencyModel`.
    """
    say = status or (lambda message: None)
    variant, _ = resolve(variant, table)
    model = get(variant)(table, config_of(variant, config))
    say(f"building and compiling the {variant} model ({len(model.rows)} rows)")
    start = time.perf_counter()
    idata = sample(model, draws=draws, tune=tune, chains=chains, seed=seed, sampler=sampler,
                   progressbar=progressbar, exact=exact)
    diag = diagnostics(idata, time.perf_counter() - start)
    # stored with the fit, so that decide and report can refuse an unconverged one
    idata.posterior.attrs[_DIAGNOSTICS_ATTR] = _diagnostics_json(diag)
    return model


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
