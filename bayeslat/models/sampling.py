"""Sampling a model variant to the convergence bar, and the convergence diagnostics.

:func:`sample` compiles a :class:`~bayeslat.models.base.LatencyModel` and draws its posterior
with nutpie (sampling to the bar: it stops at the first checkpoint where R-hat, bulk and tail
ESS pass and no transition diverged), PyMC's NUTS or numpyro, then adds the observed and constant
data and the pointwise log-likelihood (for PSIS-LOO). :func:`diagnostics` is the bar's check.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

import numpy as np
import xarray as xr

from bayeslat import compiled
from bayeslat.errors import FitError
from bayeslat.models.base import fast_mode, round_draws

SAMPLERS = ("nutpie", "pymc", "numpyro")
# Convergence: what --strict requires.
MAX_RHAT, MIN_ESS = 1.01, 400
# Sampling to the bar (sample with draws=None): it stops at the first checkpoint where the bar
# holds with ESS >= ESS_MARGIN * MIN_ESS (room for the estimate's own noise), at most MAX_DRAWS
# per chain (the capacity model on the shipped example reaches it at 1,500-2,350; the engine
# simulator's 70B sweep with Poisson arrivals, whose ceilings' scatter mixes slowly, at 5,775
# with either seed tried: bulk ESS 383 and 380 at 4,000); the samplers that cannot be checked
# as they go take FIXED_DRAWS.
ESS_MARGIN, MAX_DRAWS, FIXED_DRAWS = 1.25, 6000, 1000
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
# Smaller steps than the usual 0.8: the prefill costs leave narrow ridges between groups, and
# the drafters' memory cost, which the data bound only from above, a curved edge. On the shipped
# example with each group's memory slopes sampled as one pair (models.hierarchical), 0.95
# reached the bar on 5 seeds of 5 without a divergence in 206-213 steps a draw; 0.9 took
# 166-232 and diverged once on 2 seeds of 3 (benchmarks/README.md, twenty-seventh session).
TARGET_ACCEPT = 0.95
# Sampling to the bar that meets a divergence samples once more from the start with smaller
# steps still.
RETRY_ACCEPT = 0.98


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
    trace and its draws per chain.

    The chains are watched through nutpie's raw Arrow trace (:class:`_ArrowTrace`): a look
    costs milliseconds, where nutpie's own ``InferenceData`` of the trace so far cost 0.2-1 s
    of the cores the chains run on, two dozen times a fit."""
    run = backend.sample(compiled, blocking=False, return_raw_trace=True, **settings)
    try:
        for n in checkpoints(settings["draws"]):
            while True:
                done = not _running(run)  # before the look, so that a finished run is seen whole
                trace = _ArrowTrace(run.inspect())
                if done or trace.draws >= n:
                    break
                time.sleep(POLL_S)
            n = min(n, trace.draws)
            values, stats = trace.head(n)
            diag = _measure(_stack(values, n), int(stats["diverging"].sum()))
            ess = min(diag.min_ess_bulk, diag.min_ess_tail)
            # divergences stay in every longer trace: the bar can no longer hold
            if (diag.divergences or (diag.max_rhat <= MAX_RHAT and ess >= ESS_MARGIN * MIN_ESS)
                    or n == settings["draws"]):
                return trace.to_arviz(values, stats, compiled.coords), n
    finally:
        if _running(run):
            run.cancel()


class _ArrowTrace:
    """A look at a running nutpie sampler's raw trace (``return_raw_trace=True``): per chain,
    an Arrow batch of draws (one column a variable, tuning steps first) and one of sampler
    statistics."""

    def __init__(self, raw):
        self.chains, self.stats = raw.get_arrow_trace()
        self.tuning = [int(_column(s, "tuning").sum()) for s in self.stats]
        #: draws after tuning that every chain has finished
        self.draws = min(s.num_rows - t for s, t in zip(self.stats, self.tuning, strict=True))

    def head(self, n: int) -> tuple[dict, dict]:
        """The first ``n`` draws after tuning: ``{variable: (chain, n, *shape)}`` without the
        sampler's unconstrained values (``*__``, which PyMC does not keep), and ``{statistic:
        (chain, n)}`` of the scalar statistics."""
        def stack(batches, names):
            return {name: np.stack([_column(b, name)[t:t + n] for b, t in
                                    zip(batches, self.tuning, strict=True)]) for name in names}

        first, stats = self.chains[0], self.stats[0]
        return (stack(self.chains, [c for c in first.column_names if not c.endswith("__")]),
                stack(self.stats, [f.name for f in stats.schema if f.name not in ("chain", "draw")
                                   and not _is_list(f)]))

    def to_arviz(self, values: dict, stats: dict, coords: dict):
        """``InferenceData`` of :meth:`head`'s arrays, with the model's dims and coords."""
        import arviz as az
        import pandas as pd

        dims = {}
        for field in self.chains[0].schema:
            named = (field.metadata or {}).get(b"dims", b"").decode()
            if named and field.name in values:
                dims[field.name] = named.split(",")
        return az.from_dict(posterior=values, sample_stats=stats, dims=dims,
                            coords={k: pd.Index(v) for k, v in coords.items()})


def _is_list(field) -> bool:
    """Whether an Arrow field holds a vector per row (nutpie's gradients, mass matrix, ...)."""
    import pyarrow as pa

    kind = field if isinstance(field, pa.DataType) else pa.field(field).type
    return pa.types.is_list(kind) or pa.types.is_large_list(kind)


def _column(batch, name: str) -> np.ndarray:
    """One column of a nutpie Arrow batch as ``(rows, *shape)`` (the shape from the field's
    metadata)."""
    import pyarrow as pa

    column = batch.column(name)
    meta = column.field.metadata or {}
    shape = [int(s) for s in meta.get(b"shape", b"").decode().split(",") if s]
    values = pa.array(column)
    if _is_list(values.type):
        values = values.flatten()
    return values.to_numpy(zero_copy_only=False).reshape((batch.num_rows, *shape))


def _stack(values: dict, n: int) -> np.ndarray:
    """Every variable of :meth:`_ArrowTrace.head` as one ``(chain, n, K)`` array."""
    return np.concatenate([np.asarray(v, dtype=float).reshape(v.shape[0], n, -1)
                           for v in values.values()], axis=2)


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


def _jitter_vars(model):
    """Scale parameters to jitter between chains; the coefficients start exactly where the
    data put them (a jitter there could start a chain deep in the saturation barrier)."""
    return {rv for rv in model.free_RVs if rv.name in ("sigma", "nu") or rv.name.startswith("tau")}


def sample(model, *, draws: int | None = None, tune: int = TUNE, chains: int | None = None,
           seed: int = 0, sampler: str = "nutpie", progressbar: bool = True,
           cores: int | None = None, target_accept: float = TARGET_ACCEPT, exact: bool = False,
           log_likelihood: bool = True):
    """Sample the posterior of ``model`` (a :class:`~bayeslat.models.base.LatencyModel`).

    A start whose log density is not finite raises :class:`~bayeslat.errors.NumericalError`
    naming the terms (:meth:`LatencyModel.check_start`; with nutpie only when its own start
    fails, where a jittered start is retried without the jitter). The
    pointwise log-likelihood is added for PSIS-LOO unless ``log_likelihood`` is False (a
    refit that only predicts: 2.3 s of the example's fit), and the sampler settings go into the
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
    :data:`FIXED_DRAWS`. A number of draws is taken as given. Sampling to the bar that stops at
    a divergence samples again from the start at ``target_accept`` :data:`RETRY_ACCEPT` (the
    compiled model reused; the attr ``diverged_at`` keeps the first one's ``target_accept``).
    """
    import pymc as pm
    import pytensor

    if sampler not in SAMPLERS:
        raise FitError(f"unknown sampler {sampler!r}; use one of {', '.join(SAMPLERS)}")
    compiled.register()
    if sampler == "numpyro":
        _numpyro()  # installed, or an error saying how to install it
    clock = time.perf_counter()
    from bayeslat.models.summary import summarise  # SciPy: not for the verbs that only load

    summary = None if exact or not model.summarises else summarise(model.rows)
    likelihood = _likelihood_note(summary, exact, model)
    if summary is not None and not summary.gaussian:
        summary = None
    # nutpie compiles with numba, which runs the rows' likelihood as one fused kernel: on the
    # example a gradient of capacity 128 -> 100 us, of hierarchical 90 -> 50 us
    fused = summary is None and sampler == "nutpie" and model.fuses
    pm_model = model.build(summary=summary, fused=fused)
    if sampler != "nutpie":  # nutpie's own start failing says so, and then it is checked
        model.check_start(pm_model)
    chains = chains or default_chains()
    to_bar = draws is None and sampler == "nutpie"
    draws = draws or (MAX_DRAWS if to_bar else FIXED_DRAWS)
    timing, retried = {}, None
    start = model.initial_values(pm_model)
    if sampler == "nutpie":
        # freeze_model: data become constants, so what depends only on them is folded away
        import nutpie as backend

        compiled_model = compiled.compile_nutpie(
            pm_model, initial_points=start, jitter_rvs=_jitter_vars(pm_model),
            freeze_model=True)
        timing["compile_s"] = time.perf_counter() - clock
        clock = time.perf_counter()
        # one thread per chain (whatever the cores): the chains advance together, so that
        # each checkpoint sees all of them
        settings = {"draws": draws, "tune": tune, "chains": chains, "cores": cores or chains,
                    "seed": seed, "progress_bar": progressbar, "save_warmup": False,
                    "target_accept": target_accept}

        def run(one):
            if to_bar:
                return _sample_to_bar(backend, one, settings)
            return _drop_unconstrained(backend.sample(one, **settings)), draws

        try:
            idata, draws = run(compiled_model)
        except RuntimeError as exc:
            if not _no_start(exc):
                raise
            # a NumericalError naming the terms that are not finite (a PyTensor compile of
            # its own, 4 s on the example: paid only here), else the start without jitter
            model.check_start(pm_model)
            compiled_model = _started(compiled_model, pm_model, start, set())
            idata, draws = run(compiled_model)
        if to_bar and _stop_reason(idata) == "divergences" and target_accept < RETRY_ACCEPT:
            retried, target_accept = target_accept, RETRY_ACCEPT
            settings["target_accept"] = target_accept
            idata, draws = run(compiled_model)
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
    if fused:
        pm_model = model.build()  # the observed rows, for the pointwise log-likelihood
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
    round_draws(idata.posterior)  # what its file will hold, so that memory and file agree
    _complete(idata, pm_model, log_likelihood)
    idata.posterior.attrs["sampler"] = json.dumps(
        {"sampler": sampler, "draws": draws, "tune": tune, "chains": chains, "seed": seed,
         "target_accept": target_accept, "cores": os.cpu_count() or 1}
        | ({"max_draws": MAX_DRAWS, "stopped": _stop_reason(idata)} if to_bar else {})
        | ({"diverged_at": retried} if retried is not None else {})
        | likelihood
        | {k: round(v, 2) for k, v in timing.items()})
    model.idata = idata
    return idata


class Refitter:
    """One compiled model of a design, sampled on many data sets of that design.

    Compiling costs more than sampling a small table (about 45 s against 10 s for the 540 rows
    of the model sampler's default sweep), and calibration refits the same design with new
    observations a hundred times. nutpie compiles the model of ``model`` once, with its data
    as shared inputs rather than constants (``freeze_model=False``), and :meth:`sample` swaps
    in the observed latencies of another model of the same variant, design and configuration
    (the same rows, rates and measurement errors) and its own data-driven start, which a
    compiled model would otherwise keep from the first table. The exact likelihood of every
    row; no convergence checks while sampling (a fixed number of draws).

    Parameters
    ----------
    model
        A :class:`~bayeslat.models.base.LatencyModel` of the design (its observations only
        shape the start of the compile).
    chains, tune, draws, target_accept
        nutpie's settings for every :meth:`sample`.
    """

    def __init__(self, model, *, chains: int = MIN_CHAINS, tune: int = TUNE, draws: int = 500,
                 target_accept: float = TARGET_ACCEPT):
        self.pm_model = model.build()
        self.rows = model.rows[["config", "rps", "se_rel"]]
        self.settings = {"chains": chains, "cores": chains, "tune": tune, "draws": draws,
                         "target_accept": target_accept, "progress_bar": False,
                         "save_warmup": False}
        self._jitter = _jitter_vars(self.pm_model)
        start = model.initial_values(self.pm_model)
        self._compiled = compiled.compile_nutpie(
            self.pm_model, initial_points=start, jitter_rvs=self._jitter, freeze_model=False)

    def sample(self, model, seed: int):
        """The posterior (an ``InferenceData`` with ``posterior`` and ``sample_stats``) of
        ``model``, a model of the same design with other observed latencies, from its own
        start (jittered as :func:`sample` does; exactly there if nutpie finds no finite
        jittered start)."""
        rows = model.rows
        if not (rows["config"].equals(self.rows["config"]) and np.allclose(
                rows[["rps", "se_rel"]], self.rows[["rps", "se_rel"]], rtol=1e-9, atol=0)):
            raise FitError("a refit needs the design it was compiled for (the same rows, "
                           "rates and measurement errors); compile a Refitter for this one")
        start = model.initial_values(self.pm_model)
        data = self._compiled.with_data(log_latency_obs=rows["log_latency"].to_numpy(float))
        try:
            return self._run(data, start, self._jitter, seed)
        except RuntimeError as exc:
            if not _no_start(exc):
                raise
            return self._run(data, start, set(), seed)

    def _run(self, compiled_model, start: dict, jitter: set, seed: int):
        import nutpie

        run = _started(compiled_model, self.pm_model, start, jitter)
        return _drop_unconstrained(nutpie.sample(run, seed=seed, **self.settings))


def _no_start(exc: RuntimeError) -> bool:
    """Whether nutpie failed for want of a finite start among its (jittered) tries."""
    return any(words in str(exc) for words in ("initialization points", "initial position"))


def _started(compiled_model, pm_model, start: dict, jitter: set):
    """A compiled nutpie model that starts its chains at ``start`` (constrained values of the
    free variables), the variables in ``jitter`` jittered as PyMC does."""
    import dataclasses

    from pymc.initial_point import make_initial_point_fn

    point = make_initial_point_fn(model=pm_model, overrides=start, jitter_rvs=jitter,
                                  return_transformed=True)
    # the free values in the order of nutpie's flat vector
    names = [pm_model.rvs_to_values[rv].name for rv in pm_model.free_RVs]

    def initial(seed):
        values = point(seed)
        return np.concatenate([np.asarray(values[name], dtype=float).ravel() for name in names])

    return dataclasses.replace(compiled_model, initial_point_func=initial)


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


def _numpyro() -> None:
    """Check that numpyro, the optional JAX sampler, is installed; else say how."""
    try:
        import numpyro  # noqa: F401
    except ImportError:
        raise FitError("the numpyro sampler is not installed; pip install 'bayeslat[numpyro]' "
                       "or choose the nutpie or pymc sampler (--sampler nutpie; "
                       "sampler='nutpie' in Python)") from None


def _complete(idata, pm_model, log_likelihood: bool) -> None:
    """Add what a sampler left out: observed and constant data, the log-likelihood (if
    ``log_likelihood``)."""
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
    if log_likelihood and "log_likelihood" not in idata.groups():
        # latency rows only: PSIS-LOO compares variants on the same observations, and the
        # capacity variants' measured ceilings are data the paper's variants do not model
        pm.compute_log_likelihood(idata, var_names=["log_latency"], model=pm_model,
                                  progressbar=False, compile_kwargs=fast_mode(idata))


def diagnostics(idata, seconds: float = float("nan")) -> Diagnostics:
    """Max R-hat, min bulk and tail ESS over every posterior variable
    (:mod:`bayeslat.mcmc`, ArviZ's estimators for all variables at once), and
    divergences."""
    from bayeslat import mcmc

    stats = getattr(idata, "sample_stats", None)
    div = int(stats["diverging"].sum()) if stats is not None and "diverging" in stats else 0
    return _measure(mcmc.stack(idata.posterior), div, seconds)


def _measure(values: np.ndarray, divergences: int, seconds: float = float("nan")) -> Diagnostics:
    """:class:`Diagnostics` of draws ``(chain, draw, K)``."""
    from bayeslat import mcmc  # SciPy's special functions: imported by the verbs that use them

    def extreme(per_value, fn):
        return float(fn(per_value)) if np.isfinite(per_value).any() else float("nan")

    return Diagnostics(max_rhat=extreme(mcmc.rhat(values), np.nanmax),
                       min_ess_bulk=extreme(mcmc.ess_bulk(values), np.nanmin),
                       min_ess_tail=extreme(mcmc.ess_tail(values), np.nanmin),
                       divergences=divergences, seconds=seconds)
