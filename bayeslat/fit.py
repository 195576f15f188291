"""Sampling, convergence diagnostics, the headline, saving and loading fitted models.

:func:`run` is what ``bayeslat fit`` does: read a sweep table, build a model variant, sample it
(nutpie, PyMC's NUTS or numpyro), add the pointwise log-likelihood (for PSIS-LOO), check
convergence, write one netCDF file atomically and summarise each configuration. :func:`load`
reads such a file back into a model ready to predict.
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

from bayeslat import compiled, theory
from bayeslat.data import schema
from bayeslat.errors import FitError
from bayeslat.models import DEFAULT, get
from bayeslat.models.base import FORMAT, fast_mode, prepare, read_fit
from bayeslat.scaling import ScalingConfig

SAMPLERS = ("nutpie", "pymc", "numpyro")
EXAMPLE = Path("data/example/sweep.parquet")
# Convergence: what --strict requires.
MAX_RHAT, MIN_ESS = 1.01, 400
# Sampling to the bar (sample with draws=None): it stops at the first checkpoint where the bar
# holds with ESS >= ESS_MARGIN * MIN_ESS (room for the estimate's own noise), at most MAX_DRAWS
# per chain; the samplers that cannot be checked as they go take FIXED_DRAWS.
ESS_MARGIN, MAX_DRAWS, FIXED_DRAWS = 1.25, 2000, 1000
# Tuning steps per chain: nutpie's own default is 300; on the example 1000 took 43 s of the 60 s
# of sampling, and 500 reached the bar as well (bulk ESS 645 at 600 draws).
TUNE = 500
# The first checkpoint (draws per chain); each next one 25% later. How often the chains are
# looked at (s): each look copies the trace, which on 2 cores slowed sampling by 16% at 0.5 s.
FIRST_CHECK, POLL_S = 100, 2.0
# Chains: one per core, two to eight. On 2 cores two chains reached the bar sooner than four (the
# example 36 s against 45 s of sampling, the paper-scale sweep 45 s against 79 s): each chain
# tunes on its own, and tuning is most of the cost.
MIN_CHAINS, MAX_CHAINS = 2, 8
# Smaller steps than the usual 0.8: the prefill costs leave narrow ridges between groups.
TARGET_ACCEPT = 0.9
REQUIRED_ATTRS = ("bayeslat_format", "variant", "config", "priors", "feature_scales",
                  "data_hash", "fit_data_hash", "sampler", "bayeslat_version")


@dataclass
class Diagnostics:
    """Convergence summary of a fit."""

    max_rhat: float
    min_ess_bulk: float
    min_ess_tail: float
    divergences: int
    seconds: float

    @property
    def converged(self) -> bool:
        return (self.max_rhat <= MAX_RHAT and self.min_ess_bulk >= MIN_ESS
                and self.min_ess_tail >= MIN_ESS and self.divergences == 0)

    def problems(self) -> list[str]:
        """What fails the convergence criteria, in words."""
        out = []
        if not self.max_rhat <= MAX_RHAT:
            out.append(f"max R-hat {self.max_rhat:.3f} > {MAX_RHAT}")
        if not self.min_ess_bulk >= MIN_ESS:
            out.append(f"min bulk ESS {self.min_ess_bulk:.0f} < {MIN_ESS}")
        if not self.min_ess_tail >= MIN_ESS:
            out.append(f"min tail ESS {self.min_ess_tail:.0f} < {MIN_ESS}")
        if self.divergences:
            out.append(f"{self.divergences} divergent transitions")
        return out


def default_chains() -> int:
    """Chains for this machine: one per core, at least :data:`MIN_CHAINS` and at most
    :data:`MAX_CHAINS` (more chains reach the ESS bar sooner where cores run them at once, and
    R-hat compares more of them)."""
    return int(np.clip(os.cpu_count() or 1, MIN_CHAINS, MAX_CHAINS))


def checkpoints(most: int) -> list[int]:
    """Draws per chain at which :func:`_sample_to_bar` checks the bar: :data:`FIRST_CHECK`,
    then 25% more each time (rounded to 25), ending at ``most``."""
    out, n = [], FIRST_CHECK
    while n < most:
        out.append(n)
        n = max(n + 25, int(round(1.25 * n / 25)) * 25)
    return out + [most]


def _drop_unconstrained(idata):
    """nutpie also keeps the sampler's unconstrained values (``*_log__``); PyMC does not, and
    they would only double the file and the diagnostics' variables."""
    idata.posterior = idata.posterior.drop_vars(
        [v for v in idata.posterior.data_vars if v.endswith("__")])
    return idata


def _sample_to_bar(backend, compiled, settings: dict):
    """nutpie draws until the convergence bar holds: at each of :func:`checkpoints`, once every
    chain has that many draws, the first draws of each chain are checked (max R-hat, min bulk
    and tail ESS with :data:`ESS_MARGIN`, no divergences); sampling stops at the first that
    passes, at the first with a divergence (which every longer trace keeps, so the bar cannot
    hold), or at ``settings["draws"]``. The trace is cut at the checkpoint, not where the
    chains happened to be, so a seed gives the same fit however fast the machine. Returns the
    trace and its draws per chain."""
    run = backend.sample(compiled, blocking=False, **settings)
    try:
        for n in checkpoints(settings["draws"]):
            while True:
                done = not _running(run)  # before the look, so that a finished run is seen whole
                trace = _inspect(run)
                if done or _finished_draws(trace) >= n:
                    break
                time.sleep(POLL_S)
            head = _drop_unconstrained(trace.isel(draw=slice(0, n)))
            diag = diagnostics(head)
            ess = min(diag.min_ess_bulk, diag.min_ess_tail)
            # divergences stay in every longer trace: the bar can no longer hold
            if diag.divergences or (diag.max_rhat <= MAX_RHAT and ess >= ESS_MARGIN * MIN_ESS):
                return head, n
        trace = run.wait()
        return _drop_unconstrained(trace), trace.posterior.sizes["draw"]
    finally:
        if _running(run):
            run.cancel()


def _stop_reason(idata) -> str:
    """Why sampling to the bar stopped where it did: ``divergences``, or ``bar`` (held, or
    the most draws reached)."""
    stats = getattr(idata, "sample_stats", None)
    return "divergences" if stats is not None and bool(stats["diverging"].any()) else "bar"


def _running(run) -> bool:
    try:
        return not run.is_finished
    except TimeoutError:  # nutpie's answer while the chains still run
        return True


def _inspect(run):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ArviZ: "more chains than draws" while still tuning
        return run.inspect()


def _finished_draws(trace) -> int:
    """Draws every chain has finished (nutpie pads the others with NaN)."""
    done = np.isfinite(trace.sample_stats["step_size"].values)
    return int(np.argmin(np.c_[done, np.zeros(len(done), bool)], axis=1).min())


def _jitter_vars(model):
    """Scale parameters to jitter between chains; the coefficients start exactly where the
    data put them (a jitter there could start a chain deep in the saturation barrier)."""
    return {rv for rv in model.free_RVs if rv.name in ("sigma", "nu") or rv.name.startswith("tau")}


def sample(model, *, draws: int | None = None, tune: int = TUNE, chains: int | None = None,
           seed: int = 0, sampler: str = "nutpie", progressbar: bool = True,
           cores: int | None = None, target_accept: float = TARGET_ACCEPT, exact: bool = False):
    """Sample the posterior of ``model`` (a :class:`~bayeslat.models.base.LatencyModel`).

    The start is checked first (finite log density, :meth:`LatencyModel.check_start`). The
    pointwise log-likelihood is added for PSIS-LOO, and the sampler settings go into the
    posterior's attrs. ``target_accept`` above the default takes smaller steps, for posteriors
    whose tails (a few groups' spread) diverge at the default. Variants with the paper's curve
    sample the fast likelihood of curve summaries (:mod:`bayeslat.models.summary`; ``nu``
    then fixed at its stage-1 value and stored as a constant) unless ``exact`` or the
    scatter is heavy-tailed; the attr ``sampler`` says which and why. The pointwise
    log-likelihood is the exact one either way. Sets and returns ``model.idata``.

    The sampler is sized to the machine and to the convergence bar: ``chains`` None is
    :func:`default_chains` (one per core, 2 to 8, all run at once), and
    ``draws`` None (nutpie) draws until the bar holds (:func:`_sample_to_bar`: checked at
    :func:`checkpoints`, at most :data:`MAX_DRAWS` per chain); the other samplers then take
    :data:`FIXED_DRAWS`. A number of draws is taken as given.
    """
    import pymc as pm
    import pytensor

    if sampler not in SAMPLERS:
        raise FitError(f"unknown sampler {sampler!r}; use one of {', '.join(SAMPLERS)}")
    compiled.register()
    backend = _optional(sampler, sampler) if sampler != "pymc" else None
    clock = time.perf_counter()
    from bayeslat.models.summary import summarise  # SciPy: not for the verbs that only load

    summary = None if exact or not model.summarises else summarise(model.rows)
    likelihood = _likelihood_note(summary, exact, model)
    if summary is not None and not summary.gaussian:
        summary = None
    pm_model = model.build(summary=summary)
    model.check_start(pm_model)
    chains = chains or default_chains()
    to_bar = draws is None and sampler == "nutpie"
    draws = draws or (MAX_DRAWS if to_bar else FIXED_DRAWS)
    timing = {}
    start = model.initial_values(pm_model)
    if sampler == "nutpie":
        # freeze_model: data become constants, so what depends only on them is folded away
        compiled_model = backend.compile_pymc_model(
            pm_model, initial_points=start, jitter_rvs=_jitter_vars(pm_model),
            freeze_model=True)
        timing["compile_s"] = time.perf_counter() - clock
        clock = time.perf_counter()
        # one thread per chain (whatever the cores): the chains advance together, so that
        # each checkpoint sees all of them
        settings = {"draws": draws, "tune": tune, "chains": chains, "cores": cores or chains,
                    "seed": seed, "progress_bar": progressbar, "save_warmup": False,
                    "target_accept": target_accept}
        if to_bar:
            idata, draws = _sample_to_bar(backend, compiled_model, settings)
        else:
            idata = _drop_unconstrained(backend.sample(compiled_model, **settings))
    else:
        kwargs = {"nuts_sampler": "numpyro"} if sampler == "numpyro" else {}
        if sampler == "pymc" and not pytensor.config.cxx:
            # without a C compiler PyTensor falls back to its Python mode, which cannot build
            # the moe model's log density (one Add of more than 32 terms); numba can
            kwargs["compile_kwargs"] = {"mode": "NUMBA"}
        idata = pm.sample(draws=draws, tune=tune, chains=chains,
                          cores=cores or min(chains, os.cpu_count() or 1), random_seed=seed,
                          init="adapt_diag", initvals=start, progressbar=progressbar,
                          model=pm_model, compute_convergence_checks=False,
                          target_accept=target_accept, **kwargs)
    timing["sample_s"] = time.perf_counter() - clock
    if summary is not None:
        # the exact model's nu, fixed: a constant in every draw, so that the predictive
        # checks and the pointwise log-likelihood read the posterior as an exact fit's
        nu = xr.full_like(idata.posterior["sigma"], summary.nu)
        idata.posterior["nu"], idata.posterior["nu_excess"] = nu, nu - 2.0
        pm_model = model.build()
        # the data groups of the exact model (PyMC's sampler kept the summary model's)
        for group in ("observed_data", "constant_data"):
            if group in idata.groups():
                delattr(idata, group)
    _complete(idata, pm_model)
    idata.posterior.attrs["sampler"] = json.dumps(
        {"sampler": sampler, "draws": draws, "tune": tune, "chains": chains, "seed": seed,
         "target_accept": target_accept, "cores": os.cpu_count() or 1}
        | ({"max_draws": MAX_DRAWS, "stopped": _stop_reason(idata)} if to_bar else {})
        | likelihood
        | {k: round(v, 2) for k, v in timing.items()})
    model.idata = idata
    return idata


def _likelihood_note(summary, exact: bool, model) -> dict:
    """Which likelihood a fit samples, and why, for the sampler attrs and ``bayeslat fit``."""
    from bayeslat.models.summary import NU_GAUSSIAN

    if summary is None:
        why = ("asked for with --exact" if exact else
               f"the {model.variant} model's curve is not the paper's two coefficients")
        return {"likelihood": "exact", "why": why}
    if not len(summary.curve):
        return {"likelihood": "exact", "why": "no curve has the loads to summarise"}
    stage1 = {"summary_sigma": round(summary.sigma, 5), "summary_nu": round(summary.nu, 2)}
    if not summary.gaussian:
        return {"likelihood": "exact", "why": f"the scatter is heavy-tailed, stage-1 nu "
                f"{summary.nu:.3g} < {NU_GAUSSIAN:g}: curve summaries would misplace the "
                "shared coefficients"} | stage1
    return {"likelihood": "summary", "exact_rows": int(len(summary.exact)),
            "summarised_curves": int(len(summary.curve))} | stage1


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


def _optional(module: str, extra: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise FitError(f"the {module} sampler is not installed; pip install 'bayeslat[{extra}]' "
                       "or choose --sampler pymc") from None


def _complete(idata, pm_model) -> None:
    """Add what a sampler left out: observed and constant data, the log-likelihood."""
    import pymc as pm
    from pymc.backends.arviz import find_constants, find_observations

    dims = {name: list(d) for name, d in pm_model.named_vars_to_dims.items()}
    coords = {k: np.asarray(v) for k, v in pm_model.coords.items() if v is not None}
    for group, found in (("observed_data", find_observations(pm_model)),
                         ("constant_data", find_constants(pm_model))):
        if group not in idata.groups():
            ds = xr.Dataset({n: xr.DataArray(np.asarray(v), dims=dims.get(n)) for n, v in
                             found.items()}).assign_coords(obs=coords["obs"])
            idata.add_groups({group: ds})
    if "log_likelihood" not in idata.groups():
        # latency rows only: PSIS-LOO compares variants on the same observations, and the
        # capacity variants' measured ceilings are data the paper's variants do not model
        pm.compute_log_likelihood(idata, var_names=["log_latency"], model=pm_model,
                                  progressbar=False, compile_kwargs=fast_mode(idata))


def diagnostics(idata, seconds: float = float("nan")) -> Diagnostics:
    """Max R-hat, min bulk and tail ESS over every posterior variable
    (:mod:`bayeslat.mcmc`, ArviZ's estimators for all variables at once), and
    divergences."""
    from bayeslat import mcmc  # SciPy's stats: imported by the verbs that compute them

    post = idata.posterior
    values = mcmc.stack(post)

    def extreme(per_value, fn):
        return float(fn(per_value)) if np.isfinite(per_value).any() else float("nan")

    stats = getattr(idata, "sample_stats", None)
    div = int(stats["diverging"].sum()) if stats is not None and "diverging" in stats else 0
    return Diagnostics(max_rhat=extreme(mcmc.rhat(values), np.nanmax),
                       min_ess_bulk=extreme(mcmc.ess_bulk(values), np.nanmin),
                       min_ess_tail=extreme(mcmc.ess_tail(values), np.nanmin),
                       divergences=div, seconds=seconds)


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
