r"""Curve summaries: the fast likelihood, each latency curve reduced to a few numbers.

The paper's variants (``C1``, ``C2`` per configuration) see a configuration's rows only through
its curve, :math:`\mu_i = \log C_1 - \log(1 - r_i C_2)`. Two stages make the likelihood's cost
a matter of curves, not rows.

**Stage 1** (:func:`summarise`, NumPy, all curves at once): each curve's own parameters, in
coordinates in which its likelihood is nearly Gaussian,

.. math::
    \theta_c = (a_c, h_c) = \bigl(\log C_1,\ \log(1 - R_c C_2)\bigr),

``R_c`` the curve's top rate (``h`` is the log headroom there: any finite ``h`` keeps every row
unsaturated), fitted by Levenberg–Marquardt under the Student-t as a scale mixture of normals:
each row weighted by its EM weight :math:`(\nu+1)/(\nu(1 + u_i))`,
:math:`u_i = e_i^2/(\nu s_i^2)`, over its variance :math:`s_i^2 = \sigma^2 + \mathrm{se}_i^2`
(a point measured over few requests counts less, as in the exact likelihood), with ``sigma``
and ``nu`` pooled over every row by maximum likelihood on leverage-corrected residuals.

**Stage 2** (:meth:`CurveSummary.log_likelihood`, in the model graph): the weighted Gaussian
log likelihood of a curve, expanded to second order in :math:`\theta` around
:math:`\hat\theta_c` (Jacobian rows :math:`J_i`), in its sufficient statistics,

.. math::
    \log p_c = -\frac{n_c}{2}\log s_c^2 - \frac{W_c - 2\,\delta^\top b_c
    + \delta^\top A_c\,\delta}{2 s_c^2}, \qquad \delta = \theta_c - \hat\theta_c,

:math:`s_c^2 = \sigma^2 + \overline{\mathrm{se}^2}_c` (the curve's mean squared relative
standard error), :math:`W_c = \sum \omega_i e_i^2`, :math:`b_c = \sum \omega_i e_i J_i` (0 at
the optimum) and :math:`A_c = \sum \omega_i \frac{1 - u_i}{1 + u_i} J_i J_i^\top` (the
Student-t's observed curvature: the EM weights alone overstate what a heavy-tailed point
tells), each kept positive definite; :math:`\omega_i` is the row's stage-1 weight times
:math:`\hat s_c^2` (its precision relative to the curve's at stage 1's ``sigma``). ``sigma`` is
still sampled: it carries what the model's structure misses between curves, which no curve's
own fit can know.

Synchronous rows (their own offset ``sync_shift``) and the rows of curves with fewer than
:data:`MIN_POINTS` distinct loads keep the exact Student-t row likelihood, with ``nu`` fixed at
stage 1's. The summary stands in for the rows only where the scatter is close to Gaussian
(stage-1 ``nu`` ≥ :data:`NU_GAUSSIAN`). Under heavy tails (``nu`` near 2: a curve form that
misses its top loads) the exact fit calls the points the model's *structure* misses outliers,
which each curve's own fit cannot see: on the shipped example the summaries put medians up to
24 posterior sd from the exact fit's, so :func:`bayeslat.models.sampling.sample` then fits every row
(``benchmarks/fit_hierarchical.py`` compares the two).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import optimize, special

from bayeslat.models import start as st
from bayeslat.models.base import BARRIER_WIDTH, log_headroom

# Curves with fewer distinct loads than this keep the exact row likelihood.
MIN_POINTS = 3
# The smallest stage-1 nu at which the summaries stand in for the rows.
NU_GAUSSIAN = 10.0
# Bounds of the pooled degrees of freedom (the exact model's nu is 2 + Gamma).
NU_RANGE = (2.05, 200.0)
# Levenberg–Marquardt iterations, and how often the weights, sigma and nu are refreshed.
ITERATIONS = 60
REWEIGHT_EVERY = 10


@dataclass
class CurveSummary:
    """Stage 1's summaries of the summarised curves (in the model's curve order) and the rows
    kept exact.

    Attributes
    ----------
    curve
        Position of each summarised curve among the model's curves (configurations in order
        of first appearance in its rows).
    top
        ``R_c``: each summarised curve's top rate (req/s).
    theta
        ``(n, 2)``: :math:`\\hat\\theta_c = (\\log C_1, \\log(1 - R_c C_2))`.
    A, b, W, n
        The sufficient statistics, shapes ``(n, 2, 2)``, ``(n, 2)``, ``(n,)``, ``(n,)``.
    se2
        Each summarised curve's mean squared relative standard error.
    exact
        Positions (among the model's rows) of the rows kept exact.
    sigma, nu
        The pooled Student-t scale and degrees of freedom of stage 1.
    """

    curve: np.ndarray
    top: np.ndarray
    theta: np.ndarray
    A: np.ndarray
    b: np.ndarray
    W: np.ndarray
    n: np.ndarray
    se2: np.ndarray
    exact: np.ndarray
    sigma: float
    nu: float

    @property
    def gaussian(self) -> bool:
        """Whether the scatter is close enough to Gaussian for the summaries (module doc);
        False when no curve has :data:`MIN_POINTS` loads to summarise."""
        return len(self.curve) > 0 and self.nu >= NU_GAUSSIAN

    def log_likelihood(self, c1, c2, sigma):
        """The summarised curves' log likelihood (a scalar tensor) for per-curve tensors
        ``c1``, ``c2`` (every curve of the model) and the scatter ``sigma``."""
        import pytensor.tensor as pt

        a = pt.log(c1[self.curve])
        h = log_headroom(1.0 - self.top * c2[self.curve])
        d0, d1 = a - self.theta[:, 0], h - self.theta[:, 1]
        quad = self.A[:, 0, 0] * d0**2 + 2 * self.A[:, 0, 1] * d0 * d1 + self.A[:, 1, 1] * d1**2
        s2 = sigma**2 + self.se2
        resid = self.W - 2 * (self.b[:, 0] * d0 + self.b[:, 1] * d1) + quad
        return pt.sum(-0.5 * self.n * pt.log(s2) - resid / (2 * s2))


def summarise(rows: pd.DataFrame) -> CurveSummary:
    """Stage 1 on prepared rows (:func:`~bayeslat.models.base.prepare`, with ``log_latency``
    and ``se_rel``): the robust fit of every curve and its sufficient statistics."""
    configs = pd.Index(pd.unique(rows["config"]))
    sync = (rows["strategy"] == "synchronous").to_numpy()
    loads = rows[~sync].groupby("config")["rps"].nunique().reindex(configs).fillna(0)
    summarised = configs[(loads >= MIN_POINTS).to_numpy()]
    use = ~sync & rows["config"].isin(summarised).to_numpy()
    sub = rows[use]
    codes = summarised.get_indexer(sub["config"])
    r, y = sub["rps"].to_numpy(float), sub["log_latency"].to_numpy(float)
    n_c = len(summarised)
    if n_c == 0:
        empty = np.zeros((0, 2))
        return CurveSummary(curve=np.zeros(0, int), top=np.zeros(0), theta=empty,
                            A=np.zeros((0, 2, 2)), b=empty, W=np.zeros(0), n=np.zeros(0),
                            se2=np.zeros(0), exact=np.arange(len(rows)), sigma=np.nan,
                            nu=np.nan)
    count = np.bincount(codes, None, n_c)
    se_row = sub["se_rel"].to_numpy(float) ** 2
    se2 = np.bincount(codes, se_row, n_c) / count
    top = sub.groupby(codes)["rps"].max().to_numpy()
    theta, sigma, nu = _robust_fit(codes, r, y, se_row, top)
    e, jac = _residuals(theta, codes, r, y, top)
    u = e**2 / (nu * (sigma**2 + se_row))
    # each row's EM weight, times its precision relative to the curve's mean one at stage 1's
    # sigma (rows measured over fewer requests count less, as in the exact likelihood)
    omega = (nu + 1.0) / (nu * (1.0 + u)) * (sigma**2 + se2[codes]) / (sigma**2 + se_row)
    # the headroom as stage 2 computes it, through the saturation barrier (a shift of order
    # (BARRIER_WIDTH/headroom)²), so that the fitted curve is exactly at delta = 0
    headroom = np.exp(theta[:, 1])
    theta[:, 1] = np.log(0.5 * (headroom + np.sqrt(headroom**2 + 4 * BARRIER_WIDTH**2)))
    return CurveSummary(
        curve=configs.get_indexer(summarised), top=top, theta=theta,
        A=_positive(_sum_outer(codes, omega * (1.0 - u) / (1.0 + u), jac, n_c)),
        b=_sum(codes, (omega * e)[:, None] * jac, n_c), W=np.bincount(codes, omega * e**2, n_c),
        n=count, se2=se2, exact=np.flatnonzero(~use), sigma=sigma, nu=nu)


# -- stage 1 internals -------------------------------------------------------------------------
def _residuals(theta, codes, r, y, top):
    """Residuals ``y − mu`` and Jacobian rows ``∂mu/∂θ`` of every row."""
    a, eh = theta[codes, 0], np.exp(theta[codes, 1])
    c2 = (1.0 - eh) / top[codes]
    d = 1.0 - r * c2  # >= e^h > 0, as r <= R
    jac = np.stack([np.ones_like(r), -(r / d) * eh / top[codes]], axis=1)
    return y - a + np.log(d), jac


def _sum(codes, values, n):
    return np.stack([np.bincount(codes, values[:, j], n) for j in range(values.shape[1])], 1)


def _sum_outer(codes, w, jac, n):
    out = np.empty((n, 2, 2))
    for i in range(2):
        for j in range(i, 2):
            out[:, i, j] = out[:, j, i] = np.bincount(codes, w * jac[:, i] * jac[:, j], n)
    return out


def _positive(A):
    """Each 2×2 matrix with its eigenvalues floored at 1e-6 of its largest."""
    w, v = np.linalg.eigh(A)
    w = np.maximum(w, 1e-6 * np.maximum(w.max(axis=1, keepdims=True), 1e-12))
    return np.einsum("nij,nj,nkj->nik", v, w, v)


def _robust_fit(codes, r, y, se_row, top):
    """Levenberg–Marquardt per curve (vectorised), each row weighted by its EM weight over its
    variance ``sigma² + se²``; the weights and the pooled ``sigma``, ``nu`` refreshed every
    :data:`REWEIGHT_EVERY` iterations."""
    n_c = len(top)
    fits = st.linear_fits(codes, r, np.exp(y))
    theta = np.stack([np.log(fits["C1"].to_numpy()),
                      np.log1p(-np.minimum(top * fits["C2"].to_numpy(), st.MAX_LOAD))], axis=1)
    weight, sigma, nu = np.ones(len(r)), 0.05, 30.0
    lam = np.full(n_c, 1e-3)
    for it in range(ITERATIONS):
        e, jac = _residuals(theta, codes, r, y, top)
        if it % REWEIGHT_EVERY == 0:
            sigma, nu = _pooled_scale(e, jac, codes, weight, se_row, sigma, nu)
            weight = (nu + 1.0) / (nu + e**2 / (sigma**2 + se_row)) / (sigma**2 + se_row)
        cost = np.bincount(codes, weight * e**2, n_c)
        A = _sum_outer(codes, weight, jac, n_c)
        g = _sum(codes, (weight * e)[:, None] * jac, n_c)
        damped = A * (1.0 + lam[:, None, None] * np.eye(2)) + 1e-12 * np.eye(2)
        trial = theta + np.linalg.solve(damped, g[..., None])[..., 0]
        e_new, _ = _residuals(trial, codes, r, y, top)
        better = np.bincount(codes, weight * e_new**2, n_c) <= cost
        theta = np.where(better[:, None], trial, theta)
        lam = np.where(better, lam / 3.0, lam * 4.0)
    return theta, sigma, nu


def _pooled_scale(e, jac, codes, weight, se_row, sigma, nu):
    """``sigma``, ``nu`` by maximum likelihood of the Student-t on the residuals, corrected
    for leverage under the fit's row ``weight`` (each curve spends two of its points on its
    own fit)."""
    inv = np.linalg.inv(_sum_outer(codes, weight, jac, codes.max() + 1) + 1e-12 * np.eye(2))
    lev = np.clip(weight * np.einsum("ni,nij,nj->n", jac, inv[codes], jac), 0.0, 0.95)
    z = e / np.sqrt(1.0 - lev)

    def nll(p):
        sig, v = np.exp(p[0]), NU_RANGE[0] + np.exp(p[1])
        s = np.sqrt(sig**2 + se_row)
        return -np.sum(special.gammaln((v + 1) / 2) - special.gammaln(v / 2)
                       - 0.5 * np.log(v * np.pi) - np.log(s)
                       - (v + 1) / 2 * np.log1p((z / s) ** 2 / v))

    p0 = [np.log(max(sigma, 1e-4)), np.log(max(nu - NU_RANGE[0], 1e-3))]
    res = optimize.minimize(nll, p0, method="L-BFGS-B",
                            bounds=[(np.log(1e-5), np.log(2.0)),
                                    (np.log(1e-3), np.log(NU_RANGE[1] - NU_RANGE[0]))])
    return float(np.exp(res.x[0])), float(NU_RANGE[0] + np.exp(res.x[1]))
