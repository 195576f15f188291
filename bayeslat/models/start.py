"""Point fits per configuration and a feasible start for the samplers.

NUTS must start where every observed point is unsaturated (``rps·C2 < 1``) and the log density is
finite. The start is built bottom-up from the data:

1. per configuration, ``C1`` and ``C2`` from the linearised curve ``1/L = 1/C1 − rps·C2/C1``
   (weighted least squares, vectorised over configurations), kept inside ``rps·C2 < 1``;
2. per group, the six per-stage coefficients from those ``C1``, ``C2`` by non-negative least
   squares on ``C = c_p + (g/E)·c_v + (g·k/E)·c_d``;
3. each group's load coefficients shrunk, if needed, until its points lie below
   :data:`MAX_LOAD` of saturation.

:func:`curve_fits` is the paper's own per-configuration fit (SciPy ``curve_fit`` in log space);
the benchmark times it against the Bayesian fit. :func:`group_fit` is its fit of the six per-stage
coefficients of a group (started from steps 1 and 2), optionally with the compute queue's factor.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# SciPy is imported in the functions that use it: a verb that only loads a fit needs none of it
from bayeslat import theory
from bayeslat.data import schema
from bayeslat.models.base import BARRIER_WIDTH

# Largest rps·C2 of an observed point at the start.
MAX_LOAD = 0.95


def cycles_of(frame: pd.DataFrame) -> np.ndarray:
    """Verify cycles of each row's requests, ``g/E(alpha, k)`` (:func:`theory.verify_cycles`;
    a baseline row's missing ``alpha`` is irrelevant: ``E = 1`` at ``k = 0``)."""
    return theory.verify_cycles(frame["decode_tokens"].to_numpy(float),
                                frame["alpha"].fillna(0.0).to_numpy(float),
                                frame["k"].to_numpy(float))


def linear_fits(config: np.ndarray, rps: np.ndarray, latency: np.ndarray) -> pd.DataFrame:
    """``C1``, ``C2`` per configuration from ``1/L = a − b·rps`` (``C1 = 1/a``, ``C2 = b/a``).

    Parameters
    ----------
    config
        Integer configuration index of each row.
    rps, latency
        Achieved rate and mean latency of each row.

    Returns
    -------
    One row per configuration index (sorted): ``C1`` (s) and ``C2`` (s/req), clipped so that
    every row of the configuration has ``rps·C2 <= MAX_LOAD``.
    """
    df = pd.DataFrame({"c": config, "x": rps, "y": 1.0 / latency})
    df["xy"], df["xx"] = df["x"] * df["y"], df["x"] ** 2
    s = df.groupby("c").agg(n=("x", "size"), x=("x", "mean"), y=("y", "mean"), xy=("xy", "mean"),
                            xx=("xx", "mean"), xmax=("x", "max"))
    var = (s["xx"] - s["x"] ** 2).to_numpy()
    slope = np.where(var > 0, (s["xy"] - s["x"] * s["y"]) / np.where(var > 0, var, 1.0), 0.0)
    a = np.maximum(s["y"].to_numpy() - slope * s["x"].to_numpy(), 1e-3 * s["y"].to_numpy())
    c1 = 1.0 / a
    c2 = np.clip(-slope / a, 1e-6 * c1, MAX_LOAD / np.maximum(s["xmax"].to_numpy(), 1e-9))
    return pd.DataFrame({"C1": c1, "C2": c2}, index=s.index)


def curve_fits(config: np.ndarray, rps: np.ndarray, latency: np.ndarray) -> pd.DataFrame:
    """The paper's point fit: ``log L = log C1 − log(1 − rps·C2)`` by SciPy ``curve_fit``,
    one configuration at a time, started from :func:`linear_fits`."""
    from scipy.optimize import curve_fit

    start = linear_fits(config, rps, latency)
    out = []
    for c, (c1, c2) in start.iterrows():
        m = config == c
        x, y = rps[m], np.log(latency[m])
        upper = 1.0 / max(x.max(), 1e-9)

        def model(x, c1, c2):
            return np.log(c1) - np.log1p(-np.minimum(x * c2, 1 - 1e-12))

        try:
            (c1, c2), _ = curve_fit(model, x, y, p0=(c1, min(c2, 0.9 * upper)),
                                    bounds=([1e-9, 0.0], [np.inf, upper]))
        except (RuntimeError, ValueError):
            pass  # keep the linear start where the least squares cannot move
        out.append((c, c1, c2))
    return pd.DataFrame(out, columns=["c", "C1", "C2"]).set_index("c")


def compute_fits(config: np.ndarray, rps: np.ndarray, ceilings: pd.Series) -> pd.Series:
    """A start for ``C3`` (compute time per request, s) of each configuration.

    ``1/ceiling`` where the configuration's throughput benchmark measured one (``ceilings``,
    req/s, indexed by configuration index), else a capacity of twice its highest measured rate;
    either way kept so that every row has ``rps·C3 <= MAX_LOAD``.
    """
    top = pd.Series(rps).groupby(config).max()
    c3 = (1.0 / ceilings.reindex(top.index)).fillna(0.5 / top)
    return np.minimum(c3, MAX_LOAD / top.clip(lower=1e-9)).rename("C3")


def stage_coefficients(cycles: np.ndarray, drafted: np.ndarray, draft: np.ndarray,
                       target: np.ndarray, n_drafts: int) -> tuple[float, float, np.ndarray]:
    """Non-negative ``(c_p, c_v, c_d per draft)`` with ``target ≈ c_p + cycles·c_v +
    drafted·c_d[draft]`` over the configurations of one group.

    ``cycles = g/E``, ``drafted = g·k/E``; ``draft`` indexes ``0..n_drafts-1`` (any value where
    ``drafted`` is 0). Relative least squares: each configuration weighs by ``1/target``.
    """
    from scipy.optimize import nnls

    design = np.zeros((len(target), 2 + n_drafts))
    design[:, 0], design[:, 1] = 1.0, cycles
    has = drafted > 0
    design[np.flatnonzero(has), 2 + draft[has]] = drafted[has]
    w = 1.0 / target
    coef, _ = nnls(design * w[:, None], target * w)
    return coef[0], coef[1], coef[2:]


def floor_positive(values: np.ndarray, fraction: float = 0.05) -> np.ndarray:
    """``values`` with zeros (and tiny values) raised to ``fraction`` of their positive median,
    so that their logs exist."""
    positive = values[values > 0]
    floor = fraction * (np.median(positive) if positive.size else 1.0)
    return np.maximum(values, max(floor, 1e-12))


def group_coefficients(theta: np.ndarray, rows: pd.DataFrame, drafts: pd.Index):
    """``C1``, ``C2`` of ``rows`` from one group's coefficients ``theta``: ``c1p, c1v, c2p,
    c2v``, then ``c1d, c2d`` per drafter of ``drafts`` (:func:`group_fit`)."""
    k = rows["k"].to_numpy(float)
    d = np.maximum(drafts.get_indexer(rows["drafter"]), 0)
    c1d, c2d = (theta[4::2][d], theta[5::2][d]) if len(drafts) else (0.0, 0.0)
    alpha = np.where(k > 0, rows["alpha"].fillna(0.0).to_numpy(float), 0.0)
    return theory.effective_coefficients(theta[0], theta[1], c1d, theta[2], theta[3], c2d,
                                         alpha, k, rows["decode_tokens"].to_numpy(float))


def intercept(terms, k) -> np.ndarray:
    """The compute curve's intercept per verify cycle of configurations with draft lengths
    ``k``: ``a_v + k·a_d``, and ``a_b`` for the baseline (``terms = (a_v, a_d, a_b)``)."""
    a_v, a_d, a_b = terms
    k = np.asarray(k, float)
    return np.where(k == 0, a_b, a_v + k * a_d)


# Shares Q from which group_fit starts the compute curve's intercept.
QUEUE_STARTS = (0.01, 0.05, 0.2)
# Share of the best cost from the shares' starts below which group_fit's robust fit from least
# squares' best is taken instead.
CLEARLY_BETTER = 0.99


def group_fit(rows: pd.DataFrame, drafts: pd.Index, c3: np.ndarray | None = None,
              loss: str = "linear") -> np.ndarray | None:
    """One group's six per-stage coefficients by least squares of ``log L`` over its
    unsaturated ``rows``, every configuration at once (the paper's coefficient method).

    Started from per-configuration linear fits mapped onto the coefficients by non-negative
    least squares (:func:`stage_coefficients`), kept within e^±15 of that start (a
    coefficient the data cannot see stays finite); past saturation the residual grows
    smoothly (:data:`~bayeslat.models.base.BARRIER_WIDTH`), never a flat region.

    Parameters
    ----------
    rows, drafts
        The group's rows and its drafters (the order of ``c1d, c2d`` in the result).
    c3
        Optional: each row's wall ``C3`` (s per request, the compute time of a request at a
        full batch). The curve is then the capacity variants' (:func:`bayeslat.theory.latency`)
        with the compute curve's intercept ``A = g/E·(a_v + k·a_d)``, a verify step's and a
        drafted token's share of it per cycle, ``A = g·a_b`` for the baseline (``k = 0``),
        and ``Q = A/(B_max·C3)``; ``a_v``, ``a_d`` and ``a_b`` are fitted too, appended to
        the result (``a_b = a_v`` for a group without baseline rows).
    loss
        SciPy's ``least_squares`` loss (``"soft_l1"``: robust to a few outliers; with the
        walls it is also started from least squares' best, :data:`CLEARLY_BETTER`).

    Returns
    -------
    ``c1p, c1v, c2p, c2v``, then ``c1d, c2d`` per drafter (and ``a_v, a_d, a_b`` with
    ``c3``); None where least squares fails.
    """
    from scipy.optimize import least_squares

    codes, _ = pd.factorize(schema.config_labels(rows))
    lines = linear_fits(codes, rows["rps"].to_numpy(float), rows["latency_mean"].to_numpy(float))
    first = rows.groupby(codes).first().loc[lines.index]
    k = first["k"].to_numpy(float)
    cycles = cycles_of(first)
    d = np.maximum(drafts.get_indexer(first["drafter"]), 0)
    (c1p, c1v, c1d), (c2p, c2v, c2d) = (
        stage_coefficients(cycles, cycles * k, d, lines[stage].to_numpy(), len(drafts))
        for stage in ("C1", "C2"))
    theta0 = floor_positive(np.concatenate([[c1p, c1v, c2p, c2v],
                                            np.column_stack([c1d, c2d]).ravel()]))
    y, rps = np.log(rows["latency_mean"].to_numpy(float)), rows["rps"].to_numpy(float)
    n = len(theta0)
    row_k, row_cycles = rows["k"].to_numpy(float), cycles_of(rows)
    baseline = row_k == 0

    def residual(log_theta, power):
        c1, c2 = group_coefficients(np.exp(log_theta[:n]), rows, drafts)
        room = 1.0 - rps * c2
        log_room = np.where(room > BARRIER_WIDTH, np.log(np.maximum(room, BARRIER_WIDTH)),
                            np.log(BARRIER_WIDTH) + (room - BARRIER_WIDTH) / BARRIER_WIDTH)
        log_l = np.log(c1) - log_room
        if c3 is not None:  # L^P = L_m^P + L_c^P − A^P, A = g/E·(a_v + k·a_d), g·a_b at k = 0
            a = row_cycles * intercept(np.exp(log_theta[n:n + 3]), row_k)
            q = np.minimum(a / (theory.BATCH_CAP * c3), 0.999)
            comp = a / np.maximum(1.0 - (1.0 - q) * rps * c3, BARRIER_WIDTH)
            log_c = np.log(np.maximum(comp**power - a**power, 1e-300)) / power
            log_l = np.logaddexp(power * log_l, power * log_c) / power
        return log_l - y

    def fit(x0, power, loss=loss):
        try:
            out = least_squares(residual, x0, bounds=(x0 - 15, x0 + 15), x_scale="jac",
                                loss=loss, f_scale=0.05, args=(power,))
        except (ValueError, np.linalg.LinAlgError):
            return None
        return out if out.success else None

    if c3 is None:
        best = fit(np.log(theta0), 2.0)
        return None if best is None else np.exp(best.x)
    # a_v, a_d from a few shares Q: from one, the fit can slide to Q -> 0 (the compute curve
    # off, a local optimum) where another start finds the bend. The quadrature (P = 2) first,
    # then the norm's own powers from its best: started afresh, the 1B's p256 g128 group slid
    # to a compute intercept 8 times its memory curve's (cost 0.44 against 0.022). The
    # baseline's own a_b: its bend is the prompts' arithmetic more than a verify step's, and
    # a_v of the group's SD curves put its share Q 2.6 prior sds below what its own curve
    # wanted, two modes that a top-rate fold could not mix (benchmarks/README.md, 43rd session)
    per_cycle = np.median(c3 / np.maximum(row_cycles, 1e-9)) * theory.BATCH_CAP
    starts = [np.log(np.append(theta0, [q * per_cycle, q * per_cycle / 4, q * per_cycle]))
              for q in QUEUE_STARTS]
    fits = [f for f in (fit(x0, 2.0) for x0 in starts) if f is not None]
    if loss != "linear":
        # a robust loss also from least squares' best: from the shares' starts alone, an engine
        # sweep's 1B p256 g512 group slid to the compute curve off under soft_l1 (robust cost
        # 0.35, 0.034 from least squares' best), its bends left to the Student-t as outliers.
        # Kept only where clearly better: near ties would leave the choice to round-off
        plain = [f for f in (fit(x0, 2.0, "linear") for x0 in starts) if f is not None]
        other = fit(min(plain, key=lambda f: f.cost).x, 2.0) if plain else None
        if other is not None and (not fits or other.cost < CLEARLY_BETTER * min(
                f.cost for f in fits)):
            fits.append(other)
    if not fits:
        return None
    first = min(fits, key=lambda f: f.cost)
    best = fit(first.x, theory.soft_power(row_k))
    out = np.exp((first if best is None else best).x)
    if not baseline.any():
        out[-1] = out[-3]
    return out
