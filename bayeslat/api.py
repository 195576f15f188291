"""The Python API: a fit as an object, for notebooks and scripts.

The CLI is a thin layer over these: ``bayeslat fit`` is :func:`fit` then :meth:`Fit.save`,
``bayeslat decide`` is :func:`load` then :meth:`Fit.decide`, ``bayeslat report`` is
:meth:`Fit.report`. Everything returned is a pandas table or an xarray object with named dims.

>>> import bayeslat
>>> table = bayeslat.read_table("data/example/sweep.parquet")
>>> fit = bayeslat.fit(table, model="hierarchical")        # doctest: +SKIP
>>> fit.save("models/mine.nc")                             # doctest: +SKIP
>>> fit = bayeslat.load("models/mine.nc")                  # doctest: +SKIP
>>> fit.speedup("llama-8b H100 p256 g128", alpha=0.75)     # doctest: +SKIP
<xarray.DataArray 'speedup' (alpha: 1, rps: 12, k: 9, stat: 6)> ...
>>> fit.decide(alpha=0.75).verdicts()                      # doctest: +SKIP

``docs/api.md`` walks through a whole session; a test runs it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from bayeslat import checks, decide, fitting
from bayeslat.data import schema
from bayeslat.errors import InputError
from bayeslat.models import DEFAULT
from bayeslat.models import check as check_variant
from bayeslat.models.sampling import TUNE, Diagnostics


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """A sweep table (Parquet or tidy CSV) read and validated:
    :func:`bayeslat.data.schema.read_table`."""
    return schema.read_table(path)


def fit(data, model: str = DEFAULT, *, config=None, draws: int | None = None,
        tune: int = TUNE, chains: int | None = None, seed: int = 0, sampler: str = "nutpie",
        exact: bool = False, progressbar: bool = True, status=None) -> Fit:
    """Fit a model variant to a sweep and sample its posterior to the convergence bar.

    Parameters
    ----------
    data
        A sweep table (a DataFrame with the columns of :mod:`bayeslat.data.schema`) or the
        path of one (Parquet or tidy CSV).
    model
        The variant: ``dense``, ``speculative``, ``hierarchical``, ``moe``, ``capacity`` or
        ``dense-capacity`` (:mod:`bayeslat.models`); ``auto`` (the default) chooses for the
        sweep (:func:`bayeslat.models.choose`: ``capacity`` where it measured its ceilings).
    config
        A :class:`~bayeslat.scaling.ScalingConfig`, or a TOML or JSON file of one, overriding
        the variant's scaling design and priors.
    draws, tune, chains, seed, sampler, exact, progressbar
        The sampler's settings (:func:`bayeslat.models.sampling.sample`); ``draws`` and
        ``chains`` None size it to the machine and to the convergence bar.
    status
        Optional callable taking a one-line message about the current phase.

    Returns
    -------
    The :class:`Fit`, not yet saved (:meth:`Fit.save`). Check :attr:`Fit.converged`.
    """
    check_variant(model)
    if isinstance(data, pd.DataFrame):
        table = schema.validate(schema.fill_optional(data))
    else:
        (status or (lambda message: None))(f"reading {data}")
        table = schema.read_table(data)
    return Fit(fitting.sample_table(table, model, config=config, draws=draws, tune=tune,
                                    chains=chains, seed=seed, sampler=sampler,
                                    progressbar=progressbar, status=status, exact=exact))


def load(path: str | os.PathLike) -> Fit:
    """A fit saved by :meth:`Fit.save` or ``bayeslat fit``, ready to decide and report
    (:func:`bayeslat.fitting.load`: checked and read without ArviZ)."""
    return Fit(fitting.load(path), path)


class Fit:
    """A fitted latency model with its posterior: what :func:`fit` and :func:`load` return.

    Attributes
    ----------
    model
        The fitted :class:`~bayeslat.models.base.LatencyModel` (its ``predict`` gives the
        posterior of any rows).
    path
        The file it was loaded from or saved to; None until saved.
    """

    def __init__(self, model, path: str | os.PathLike | None = None):
        self.model = model
        self.path = None if path is None else Path(path)

    def __repr__(self) -> str:
        where = self.path or "not saved"
        state = "converged" if self.converged else "NOT converged"
        return (f"<bayeslat.Fit {self.variant}: {len(self.model.rows)} rows, "
                f"{len(self.setups())} setups, {state}; {where}>")

    @property
    def variant(self) -> str:
        """The model variant's name."""
        return self.model.variant

    @property
    def table(self) -> pd.DataFrame:
        """The sweep table it was fitted to (saturated rows included)."""
        return self.model.table

    @property
    def posterior(self) -> xr.Dataset:
        """The posterior draws, dims ``chain``, ``draw`` and the model's own."""
        return self.model.posterior

    @property
    def idata(self):
        """The whole ArviZ ``InferenceData`` (read on first use for a loaded fit)."""
        return self.model.idata

    @property
    def diagnostics(self) -> Diagnostics:
        """Its convergence: max R-hat, min bulk and tail ESS, divergences."""
        return fitting.convergence(self.model)

    @property
    def converged(self) -> bool:
        """Whether it passed the convergence bar (R-hat, ESS, no divergences)."""
        return self.diagnostics.converged

    def save(self, path: str | os.PathLike, overwrite: bool = False) -> Path:
        """Write the fit to one netCDF file, atomically; an existing file is an error unless
        ``overwrite``."""
        self.path = self.model.save(path, overwrite=overwrite)
        self.model.path = str(self.path)
        return self.path

    def setups(self) -> pd.DataFrame:
        """The setups it can decide about: one row per (group, drafter) measured with SD,
        labelled ``setup`` (the labels :meth:`decide` takes)."""
        return decide.setups(self.model.table)

    def adequacy(self, seed: int = 0):
        """How well the model fits its own data (:func:`bayeslat.adequacy.check`): coverage
        overall and at each configuration's top loads, capacity against the measured
        ceilings, and warnings in words."""
        from bayeslat import adequacy

        return adequacy.check(self.model, seed=seed)

    def headline(self, seed: int = 0) -> pd.DataFrame:
        """Per measured SD configuration: the zero-load speedup and RPS* (median, 90%
        interval, P(exists)); :func:`bayeslat.decide.headline`."""
        return decide.headline(self.model, seed)

    def baselines(self, seed: int = 0) -> pd.DataFrame:
        """Per measured configuration without SD: ``C1``, ``C2`` and the capacity (median,
        90% interval); :func:`bayeslat.decide.baselines`."""
        return decide.baselines(self.model, seed)

    def decide(self, alpha, *, setup: str | None = None, rps=None, k=None,
               prefill: float | None = None, decode: float | None = None,
               verifier_params: float | None = None, drafter_params: float | None = None,
               risk: float = 0.05, max_saturated: float = decide.MAX_SATURATED,
               seed: int = 0, allow_unconverged: bool = False, jobs: int | None = 1,
               single: bool = False) -> Decisions:
        """Speedup bands, RPS*, k* and the risk-aware choice of k, per setup.

        Parameters
        ----------
        alpha
            Acceptance rate(s).
        setup
            Only the setups whose label contains this text (:meth:`setups`); None: all.
        rps
            Loads (req/s); None: each setup's own grid, 12 loads from 0 to its measured
            ceiling (:func:`bayeslat.decide.default_loads`).
        k
            Draft lengths to compare (0, no SD, is always added); None: every draft length
            the fit measured (a k never measured is an extrapolation at every load).
        prefill, decode, verifier_params, drafter_params
            Predict the chosen setups at another prompt or output length (tokens) or model
            size (1e9 parameters): a setup never measured, every load extrapolated.
        risk
            The risk-aware choice has the lowest latency at probability ``1 − risk`` (the
            true latency's posterior ``1 − risk`` quantile).
        max_saturated
            Largest share of draws in which a chosen k may be past its capacity.
        seed
            Seed of the draws for groups never measured and of the scatter of the truth.
        allow_unconverged
            Decide from a fit that did not converge (its :attr:`Decisions.warnings` say so);
            else that is an error.
        jobs
            Processes that analyse the setups (None: one per core).
        single
            Require the setup text to choose exactly one setup.

        Returns
        -------
        :class:`Decisions`
        """
        alphas = checks.alphas(alpha)
        ks = (np.unique(self.model.table["k"].to_numpy(int)) if k is None
              else checks.draft_lengths(k))
        loads = None if rps is None else checks.loads(rps)
        options = {"epsilon": checks.share(risk, "risk"), "seed": seed,
                   "max_saturated": checks.share(max_saturated, "max_saturated",
                                                 below_one=True)}
        diag = fitting.require_converged(self.model, allow_unconverged)
        chosen = self.choose(setup, single)
        for column, name, value in (("prefill_tokens", "prefill", prefill),
                                    ("decode_tokens", "decode", decode),
                                    ("verifier_params_b", "verifier_params", verifier_params),
                                    ("drafter_params_b", "drafter_params", drafter_params)):
            if value is not None:
                chosen[column] = checks.positive(value, name)
        chosen["setup"] = schema.draft_labels(chosen)  # other lengths: another group
        try:
            decide.measured_loads(self.model, chosen)  # refuses a group without baseline rows
        except InputError as exc:
            hint = "; or choose a setup of another group" if len(chosen) > 1 else ""
            raise InputError(exc.detail + hint, field="setup") from None
        if loads is not None:
            datasets = [decide.from_model(self.model, chosen, alphas, ks, loads, **options)]
        else:
            datasets = decide.each_setup(self.model, chosen, alphas, ks,
                                         decide.default_loads(self.model, chosen, seed=seed),
                                         jobs=jobs, **options)
        warnings = [] if diag.converged else [fitting.unconverged_warning(diag)]
        info = pd.concat([_setup_info(ds) for ds in datasets], ignore_index=True)
        new = chosen[chosen["setup"].isin(info.loc[info["new_setup"], "setup"])]
        warnings += [_new_setup_warning(self.model.table, row) for row in new.itertuples()]
        warnings += fitting.misfit_warnings(self.model, chosen)
        arrivals = decide.arrivals(self.model.table)
        if arrivals == "mixed":
            warnings.append(decide.arrivals_note(arrivals))
        return Decisions(datasets=datasets, setups=chosen, info=info, warnings=warnings,
                         diagnostics=diag, arrivals=arrivals)

    def choose(self, text: str | None = None, single: bool = False) -> pd.DataFrame:
        """The rows of :meth:`setups` whose label contains ``text`` (all for None); with
        ``single``, exactly one."""
        setups = self.setups()
        if setups.empty:
            raise InputError("the fit has no speculative configurations to decide about "
                             "(no rows with k > 0)", field="setup")
        if text:
            setups = setups[setups["setup"].str.contains(text, regex=False)]
            if setups.empty:
                raise InputError(f"no setup contains {text!r}; the fit's setups: "
                                 + "; ".join(self.setups()["setup"]), field="setup")
        if single and len(setups) > 1:
            raise InputError(f"{len(setups)} setups contain {text!r}; choose one of: "
                             + "; ".join(setups["setup"]), field="setup")
        return setups.reset_index(drop=True).copy()

    def speedup(self, setup: str, alpha, *, rps=None, k=None, **options) -> xr.DataArray:
        """The speedup of each k over no SD at each load, for one setup: quantiles (``stat``:
        ``q05`` ... ``q95``) of the true latency's ratio and ``mean`` (the ratio of expected
        latencies), dims ``alpha``, ``rps``, ``k``, ``stat``. ``options``: as
        :meth:`decide`."""
        ds = self.decide(alpha, setup=setup, rps=rps, k=k, single=True, **options)
        return ds.dataset()["speedup"].squeeze("setup", drop=True)

    def break_even(self, setup: str, alpha, *, k=None, **options) -> pd.DataFrame:
        """RPS* (the load above which SD stops paying), its alert line and the capacity, per
        (alpha, k) of one setup (:func:`bayeslat.decide.break_even_table`)."""
        return self.decide(alpha, setup=setup, k=k, single=True, **options).break_even()

    def report(self, path: str | os.PathLike, *, overwrite: bool = False,
               others=(), **options) -> Path:
        """Write the HTML report of this fit (compared with ``others`` by PSIS-LOO: paths or
        :class:`Fit`). ``options``: ``seed``, ``rps``, ``alpha``, ``jobs``,
        ``allow_unconverged``, ``status`` of :func:`bayeslat.report.build`."""
        from bayeslat import report

        fits = [self.model] + [o.model if isinstance(o, Fit) else o for o in others]
        return report.write(fits, path, overwrite=overwrite, **options)


@dataclass
class Decisions:
    """What :meth:`Fit.decide` found, per setup.

    Attributes
    ----------
    datasets
        One :func:`bayeslat.decide.analyse` Dataset per setup (each on its own load grid):
        dims ``setup``, ``alpha``, ``rps``, ``k``, ``stat``.
    setups
        The setups decided about (rows of :meth:`Fit.setups`, with any new lengths or sizes).
    info
        Per setup: ``new_setup`` (never measured), ``rps_measured``, ``rps_ceiling`` (req/s)
        and ``ceiling_measured`` (from a throughput benchmark).
    warnings
        What every output of these decisions must carry (an unconverged fit, setups never
        measured).
    diagnostics
        The fit's convergence.
    arrivals
        How the fitted benchmarks sent their requests, which is what a load means
        (:func:`bayeslat.decide.arrivals`: ``constant``, ``poisson``, ``mixed``).
    """

    datasets: list[xr.Dataset]
    setups: pd.DataFrame
    info: pd.DataFrame
    warnings: list[str] = field(default_factory=list)
    diagnostics: Diagnostics | None = None
    arrivals: str = "constant"

    def dataset(self, setup: str | None = None) -> xr.Dataset:
        """The Dataset of ``setup`` (its label), or the only one."""
        if setup is None:
            if len(self.datasets) != 1:
                raise InputError(f"{len(self.datasets)} setups were decided; name one",
                                 field="setup")
            return self.datasets[0]
        for ds in self.datasets:
            if setup in ds["setup"].values:
                return ds.sel(setup=[setup])
        raise InputError(f"no decisions for {setup!r}; decided: "
                         + "; ".join(self.setups["setup"]), field="setup")

    def table(self, policy: str = "risk") -> pd.DataFrame:
        """One row per (setup, alpha, rps): the k of ``policy`` (``risk`` or ``neutral``)
        and its speedup band, P(SD hurts), regret, P(saturated)
        (:func:`bayeslat.decide.decision_table`)."""
        if policy not in ("risk", "neutral"):
            raise InputError("use risk or neutral", field="policy")
        return pd.concat([decide.decision_table(ds, policy) for ds in self.datasets],
                         ignore_index=True)

    def break_even(self) -> pd.DataFrame:
        """One row per (setup, alpha, k > 0): RPS*, the alert line, the capacity
        (:func:`bayeslat.decide.break_even_table`)."""
        return pd.concat([decide.break_even_table(ds) for ds in self.datasets],
                         ignore_index=True)

    def verdicts(self) -> pd.DataFrame:
        """The answer per (setup, alpha, rps): SD on or off, which k, how sure, and why in
        words (:func:`bayeslat.decide.verdicts`)."""
        return pd.concat([decide.verdicts(ds) for ds in self.datasets], ignore_index=True)

    def vllm_config(self, alpha: float | None = None, policy: str = "risk",
                    max_batch: int = 256) -> dict:
        """vLLM's ``--speculative-config`` for the one setup decided, at ``alpha`` (the first
        decided when None): k*(rps) as batch-size ranges (:func:`bayeslat.decide.vllm_config`)."""
        ds = self.dataset()
        row = self.setups.iloc[0]
        decided = ds["alpha"].values
        at = np.isclose(decided, decided[0] if alpha is None else alpha)
        if not at.any():
            raise InputError(f"alpha {alpha:g} was not decided; decided: "
                             + ", ".join(f"{a:g}" for a in decided), field="alpha")
        return decide.vllm_config(ds, row["setup"], float(decided[at][0]), row["method"],
                                  row["drafter"], policy, max_batch)


# What a setup never measured is predicted along, in the words of its warning.
_SCALED = (("verifier_params_b", "verifier size", "B parameters"),
           ("drafter_params_b", "drafter size", "B parameters"),
           ("prefill_tokens", "prompt length", " tokens"),
           ("decode_tokens", "output length", " tokens"))


def _new_setup_warning(table: pd.DataFrame, setup) -> str:
    """What a decision for a setup never measured rests on: the scaling laws at every load
    and, where its sizes or lengths lie outside those measured, their extrapolation, which
    the held-out checks showed wrong beyond its bands."""
    text = (f"{setup.setup} was never measured: every load is a prediction of the scaling "
            "laws (extrapolated)")
    outside = []
    for column, name, unit in _SCALED:
        measured, value = table[column].dropna(), getattr(setup, column)
        if len(measured) and value == value and not measured.min() <= value <= measured.max():
            outside.append(f"its {name}, {value:g}{unit}, lies outside those measured "
                           f"({measured.min():g}–{measured.max():g}{unit})")
    if outside:
        text += ("; " + "; ".join(outside) + ": the laws extrapolate there (held out on the "
                 "shipped example, a verifier at either end of the size range came out 2.6 "
                 "times too slow, a whole workload 6.5–51% off (median 5–18%), most near "
                 "capacity; `bayeslat validate --split workload,verifier` checks your "
                 "sweep): measure it before deciding")
    return text


def _setup_info(ds: xr.Dataset) -> pd.DataFrame:
    """Per setup: whether it was measured, how far, and its ceiling (req/s)."""
    cols = ["new_setup", "rps_measured", "rps_ceiling", "ceiling_measured"]
    out = ds[cols].to_dataframe()[cols].reset_index()
    for col in ("new_setup", "ceiling_measured"):
        out[col] = out[col].astype(bool)
    return out
