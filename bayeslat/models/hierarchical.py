r"""``hierarchical`` (the default): six per-stage coefficients with linear scaling priors.

Units. A *group* ``j`` (verifier, hardware, prefill ``p``, decode ``g``) has the verifier-side
coefficients ``c1p, c1v, c2p, c2v``, shared by its baseline (``k = 0``) rows and every SD
configuration in it, so the baseline anchors them. A *draft* ``d`` (a group with one drafter,
``method:drafter``) has the drafter-side ``c1d, c2d``: the marginal cost per drafted token, the
drafter step plus verifying that token.

.. math::
    c_{qu} = (x_{qu} \cdot \beta_q)\, e^{\tau_q z_{qu}}, \quad
    \beta_{qf} \sim \mathrm{HalfNormal}(b_q), \quad \tau_q \sim \mathrm{Gamma}(2, 2/t),
    \quad z_{qu} \sim N(0, 1),

    C_1 = c_{1p} + \tfrac{g}{E}(c_{1v} + k\,c_{1d}), \qquad
    C_2 = c_{2p} + \tfrac{g}{E}(c_{2v} + k\,c_{2d}), \qquad E = E(\alpha, k),

with ``x`` the unit's standardised features (:mod:`bayeslat.scaling`: which features each
coefficient scales with, and the prior scales ``b_q`` in physical units, are configuration), and
the likelihood of :mod:`bayeslat.models.base`. Where the sweep has two servers or more (a
*server*: a verifier on its hardware, :data:`MIN_SERVERS`), a group coefficient's deviation
is its server's plus its own,

.. math::
    c_{qj} = (x_{qj} \cdot \beta_q)\, e^{u_{q s(j)} + \tau_q z_{qj}}, \qquad
    u_{q\cdot} = B\, w_q, \quad w_q \sim N(0, \tau_S), \quad
    \tau_S = 0.5 \text{ (the ``server_spread`` prior)}:

a law in the verifier's size does not know the bytes a token reads or the bandwidth that
reads them, so it misses each server by a factor that all of the server's workloads share (the
example's per-token decode cost ``c1v``: 0.80, 1.55 and 0.74 times its law for a 1B and an 8B
on an H100 and a 70B in fp8 on an H200, the same to 1% in each of their four workloads). ``B``
is an orthonormal basis of the server deviations a law of an intercept and the size cannot
make (:func:`_contrasts`; dim ``server_contrast``: one for three servers of three sizes, none
for two): deviations along the law would trade with its betas, a ridge only the priors bound
(free deviations took 634 leapfrog steps a draw on the example and did not converge; with
the contrasts 189, converged). A new workload of a measured server inherits its server's
deviation; a server never measured gets a fresh one, ``N(0, τ_S)`` (dim ``new_server``), and
its bands the spread between servers. The deviations are centred
(``log c ~ Normal(log(x·beta), tau)``, which mixes well with many points per group) except
for the coefficients in ``config.noncentered`` (default ``c1p``, a small share of the latency
that the data inform least: ``log c = log(x·beta) + tau·z``) and, in this variant, ``c1v``
where its server contrasts and its spread are sampled
(:attr:`HierarchicalModel.contrast_noncentered`: the servers leave its groups a spread of
2.6%, and centred it funnelled). New groups and drafters (never
measured) are predicted from the population: ``x·beta`` at their features times a fresh
deviation ``exp(tau·z)``.

A prefill's stall ``c2p`` scales, by default, with the prefill's arithmetic past its GPU's
roofline knee (the ``prefill_excess`` feature, :func:`bayeslat.theory.prefill_excess`),

.. math::
    x_{j,\mathrm{excess}} = N_j\, w \log\bigl(1 + e^{(p_j - \kappa_{s(j)})/w}\bigr),
    \quad w = \kappa/8, \qquad \kappa_s \sim \mathrm{LogNormal}(\log 150, 1)

(the ``prefill_knee`` prior; dim ``server``, one knee per server, and a server never measured
draws its own): below the knee a prefill costs the running requests little more than the step
they share, past it its arithmetic, ``N (p − κ)``. Linear in ``N p``, the law missed the
example's stalls, which grow 100-fold (1B), 31-fold (8B) and 5.4-fold (70B fp8) from 256 to
1,024 prompt tokens, by factors its groups' spread had to carry (``tau_c2p`` 0.55), and a
workload held out by 9–17%; with the knees (fitted 273, 182 and 74 tokens, the GPUs'
FLOPs per byte putting them near 220, 220 and 77) the spread is 0.09 and the held-out
workloads are 6.5–11% off (benchmarks/README.md, thirty-first session). With two prompt
lengths per server a knee is set by its prior as much as by the data: the bands of a prompt
length never measured say so. The ``capacity`` variant keeps the linear law
(:data:`bayeslat.models.capacity.CAPACITY_STALL`).

A group's memory slopes ``c2p`` and ``c2v`` (both centred) are one variable ``log_c2`` (dims
``group``, ``memory``) with the same independent normal priors, which the sampler sees as

.. math::
    s_j = \log(c_{2p} + g\,m_j\,c_{2v}), \qquad u_j = \log c_{2p} - \log(g\,m_j\,c_{2v}),

``m_j`` the mean of ``1/E`` over the group's measured configurations (:func:`memory_pair`, a map
with unit Jacobian): the data pin the sum a configuration's ``C2`` is made of, not its split,
and sampled apart the two ran along a ridge (correlation −0.6 to −0.9 in the example's groups).
In these coordinates the example's fit takes 206–213 leapfrog steps a draw at ``target_accept``
0.95 where it took 315–325 (benchmarks/README.md, twenty-seventh session). Where the stall has
knees and the spreads are sampled, the two are non-centred instead
(:meth:`HierarchicalModel.centred`). Where ``c2d`` is centred with its spread fixed and every
group has one drafter, that drafter's ``log c2d`` joins them as a third column
(:func:`memory_pair`): the data leave ``c2d`` at its prior but bound it by the slope the
group's configurations pin, a bound that in the pair's coordinates and ``c2d``'s own log is a
curved ridge (the capacity variant's divergences, benchmarks/README.md, thirty-eighth
session).

A level with fewer units than the ``tau_min_units`` prior (10) has its spread fixed,
:math:`\tau_q = t`, instead of sampled: the deviations of four workloads of one verifier tell
nothing firm about their spread, and a sampled ``tau`` then reached 0, where the deviations
funnel whatever their parametrisation (the example's four Llama-8B groups: R-hat 1.075 and 2
divergences sampled; converged with ``tau`` fixed, ``benchmarks/few_groups.py``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from bayeslat import scaling, theory
from bayeslat.data import metadata, schema
from bayeslat.errors import FitError, InputError
from bayeslat.models import start as st
from bayeslat.models.base import LatencyModel, prepare, unit_index

UNIT_COLUMNS = ("verifier_params_b", "prefill_tokens", "decode_tokens", "drafter_params_b",
                "moe_experts_active", "moe_experts_total")


# The group coefficients sampled as one pair (:meth:`HierarchicalModel.paired_logs`).
PAIR = ("c2p", "c2v")
# The fewest servers (a verifier on its hardware) with a level of their own between the laws
# and the groups. With one, its deviation is the laws' scale itself; with two, a law of an
# intercept and the size passes through both (no contrast is sampled), but a server never
# measured is still predicted with the spread between servers.
MIN_SERVERS = 2


def _contrasts(sizes: np.ndarray) -> np.ndarray:
    """An orthonormal basis (servers × contrasts) of the server deviations a law of an
    intercept and the verifier's size cannot make: a deviation along either would trade with
    the law's betas, a ridge bounded only by the priors (634 leapfrog steps a draw on the
    example). Three servers of three sizes leave one contrast, two none."""
    law = np.column_stack([np.ones_like(sizes), sizes])
    u, sv, _ = np.linalg.svd(law, full_matrices=True)
    rank = int((sv > 1e-9 * sv.max()).sum())
    return np.ascontiguousarray(u[:, rank:])  # a constant numba can cache (compiled.py)


def memory_pair(log_weight):
    r"""The sampler's coordinates of ``(log c2p, log c2v)`` per group, ``log_weight`` each
    group's ``log(g·m)`` (:meth:`HierarchicalModel.memory_weights`): ``s = log(c2p + g·m·c2v)``,
    ``u = log c2p − log(g·m·c2v)``, a map with unit Jacobian.

    With ``log_weight`` of shape ``(group, 2)``, the second column each group's
    ``log(g·m_d)`` (:meth:`HierarchicalModel.draft_weights`), the coordinates of
    ``(log c2p, log c2v, log c2d)``, the drafter's with the pair: the pair's sum
    ``P = log(c2p + g·m·c2v)`` and split ``u`` as above, then the same map of ``(log(g·m_d·c2d),
    P)``: ``s = log(e^P + g·m_d·c2d)``, ``v = log(g·m_d·c2d) − P``; unit Jacobian too."""
    import pytensor.tensor as pt
    from pymc.logprob.transforms import Transform

    log_weight = np.asarray(log_weight, dtype=float)
    triple = log_weight.ndim == 2
    # contiguous columns: numba caches no function holding a strided constant (compiled.py)
    weight, weight_d = (np.ascontiguousarray(log_weight.T) if triple else (log_weight, None))
    weight = pt.as_tensor(weight)
    weight_d = pt.as_tensor(weight_d) if triple else None

    class MemoryPair(Transform):
        r"""``(a, b) = (\log c_{2p}, \log c_{2v})`` ↔ ``(s, u)``:
        :math:`a = s - \mathrm{softplus}(-u)`, :math:`b = s - \mathrm{softplus}(u) - \log gm`;
        :math:`|\partial(a, b)/\partial(s, u)| = \sigma(u) + \sigma(-u) = 1`; a triple
        composes two such maps."""

        name = "memory"  # no underscore: PyMC reads the variable's name back up to the last one

        def forward(self, value, *inputs):
            a, b = value[..., 0], value[..., 1] + weight
            pair = pt.logaddexp(a, b)
            if not triple:
                return pt.stack([pair, a - b], axis=-1)
            d = value[..., 2] + weight_d
            return pt.stack([pt.logaddexp(d, pair), a - b, d - pair], axis=-1)

        def backward(self, value, *inputs):
            s, u = value[..., 0], value[..., 1]
            if triple:  # the pair's sum and the drafter's log, as the pair's own map
                v = value[..., 2]
                d, s = s - pt.softplus(-v) - weight_d, s - pt.softplus(v)
            pair = [s - pt.softplus(-u), s - pt.softplus(u) - weight]
            return pt.stack(pair + [d] if triple else pair, axis=-1)

        def log_jac_det(self, value, *inputs):
            return pt.zeros_like(value)

    return MemoryPair()


def law_coordinates(log_weight):
    r"""The sampler's coordinates of a scaling law's positive ``beta`` (dim ``feature``):
    the log of the law at a unit with features ``m`` (``log_weight = log m``, the fitted units'
    mean, 1 after :func:`scaling.standardise`) and the features' log shares of it against the
    last one,

    .. math::
        s = \log \textstyle\sum_f m_f\beta_f, \qquad
        u_f = \log(m_f\beta_f) - \log(m_F\beta_F), \quad f < F.

    The data pin ``s`` and leave the split loose; in ``log beta`` an unneeded term's
    coefficient runs down a curved ridge (``log beta_f`` free once it is small, tied to the
    others while it is not). ``(s, u) → log beta`` has unit Jacobian, so
    ``log |det| = Σ_f log beta_f``."""
    import pytensor.tensor as pt
    from pymc.logprob.transforms import Transform

    weight = np.asarray(log_weight, dtype=float)
    n = len(weight)

    def log_beta(value):
        # one column a feature (two or three), elementwise
        u = [value[..., f] for f in range(1, n)]
        lse = u[0]
        for one in u[1:]:
            lse = pt.logaddexp(lse, one)
        head = value[..., 0] - pt.softplus(lse)
        return [head + one - w for one, w in zip(u + [0.0], weight, strict=True)]

    class LawCoordinates(Transform):
        name = "law"  # no underscore: PyMC reads the variable's name back up to the last one

        def forward(self, value, *inputs):
            lb = [pt.log(value[..., f]) + weight[f] for f in range(n)]
            total = lb[0]
            for one in lb[1:]:
                total = pt.logaddexp(total, one)
            return pt.stack([total] + [one - lb[-1] for one in lb[:-1]], axis=-1)

        def backward(self, value, *inputs):
            return pt.exp(pt.stack(log_beta(value), axis=-1))

        def log_jac_det(self, value, *inputs):
            return sum(log_beta(value))

    return LawCoordinates()


def _dim(coef: str) -> str:
    return "draft" if coef in scaling.PER_DRAFT else "group"


class HierarchicalModel(LatencyModel):
    """Six per-stage coefficients per group and drafter, tied by linear scaling priors."""

    variant = "hierarchical"
    # the coefficients this variant samples (the capacity variant adds the compute wall's)
    coef_names: tuple[str, ...] = scaling.COEFS
    # Sampled non-centred where their server contrasts and their spread are sampled
    # (:meth:`centred`): the server takes up the deviation its groups share, the spread left
    # is small (the example's c1v: 2.6%), and centred the spread funnelled (R-hat 1.10, bulk
    # ESS 39; non-centred 950 draws). With the spread fixed (fewer groups than tau_min_units)
    # there is no funnel, and non-centred the data-pinned deviations mixed slowly (the
    # example's workload folds: 155–237 s a fit, one not converged). The capacity variant
    # mixes faster centred (1,500 draws at 189 steps against 1,875 at 251): empty there.
    contrast_noncentered: tuple[str, ...] = ("c1v",)
    # Coefficients whose spread is fixed at the tau_mean prior however many units there are
    # (:meth:`fixed_tau`): none here.
    fixed_spread: tuple[str, ...] = ()
    # Coefficients whose law's betas are sampled in :func:`law_coordinates` (each adds ~2 s
    # to the compile): none here.
    law_coordinate_coefs: tuple[str, ...] = ()

    def features(self, coef: str) -> tuple[str, ...]:
        """The features ``coef`` scales with (intercept first)."""
        return self.config.features(coef)

    def setup(self, scales: dict | None) -> None:
        rows = self.rows
        if not (rows["k"] > 0).any():
            raise FitError(f"the {self.variant} model needs SD rows (k > 0) to tell the verify "
                           "and draft costs apart; fit baseline-only data with the dense or "
                           "dense-capacity variant (--model dense; model='dense' in Python)")
        unknown = rows.loc[rows["verifier_params_b"].isna(), "verifier"].unique()
        if len(unknown) and rows["verifier"].nunique() > 1:
            raise InputError(
                f"unknown (NaN) for {', '.join(sorted(unknown))}: the scaling laws tie "
                "verifiers of different sizes, so each needs its size; give verifier_params_b "
                f"in the metadata of its reports ({metadata.DIR_FILE}) or the table's column",
                field="verifier_params_b")
        self.units = {
            "group": rows.drop_duplicates("group").set_index("group")[list(UNIT_COLUMNS)],
            "draft": rows[rows["k"] > 0].drop_duplicates("draft").set_index("draft")[
                list(UNIT_COLUMNS)],
        }
        first = rows.drop_duplicates("group")
        servers = schema.server_labels(first)
        self.servers = pd.Index(pd.unique(servers))
        self.server_idx = self.servers.get_indexer(servers)  # each group's server
        #: each server's verifier size (billions of parameters), in :attr:`servers` order
        self.server_sizes = first.groupby(servers.to_numpy(), sort=False)[
            "verifier_params_b"].first().reindex(self.servers).to_numpy(float)
        self.contrasts = (None if len(self.servers) < MIN_SERVERS
                          else _contrasts(self.server_sizes))
        self.scales, self.x = {}, {}
        for coef in self.coef_names:
            units = self.units[_dim(coef)]
            given = None if scales is None else scales[coef]
            self.x[coef], self.scales[coef] = scaling.standardise(units, self.features(coef),
                                                                  given)

    def scales_dict(self) -> dict:
        return self.scales

    def coords(self):
        # the contrasts' and the knees' dims where there are any (the fit's coords are those
        # its variables use)
        servers = ({"server_contrast": np.arange(self.contrasts.shape[1])}
                   if any(map(self.contrasted, self.coef_names)) else {})
        if any(map(self.knee_feature, self.coef_names)):
            servers["server"] = self.servers.to_numpy()
        return {"group": self.units["group"].index.to_numpy(),
                "draft": self.units["draft"].index.to_numpy(), **servers,
                **{f"{c}_feature": list(self.scales[c]) for c in self.coef_names}}

    def leveled(self, coef: str) -> bool:
        """Whether ``coef`` has a deviation per server (:data:`MIN_SERVERS`): the group
        coefficients of a sweep of enough servers."""
        return self.contrasts is not None and _dim(coef) == "group"

    def contrasted(self, coef: str) -> bool:
        """Whether ``coef``'s server deviations are sampled: it has a level per server
        (:meth:`leveled`) and the servers' sizes leave a contrast the laws cannot make."""
        return self.leveled(coef) and self.contrasts.shape[1] > 0

    def centred(self, coef: str) -> bool:
        """Whether ``coef``'s unit deviations are sampled centred: unless the configuration
        names it non-centred, or its spread is sampled and either the variant samples it
        non-centred where its server contrasts are sampled (:attr:`contrast_noncentered`)
        or it is one of the memory slopes (:data:`PAIR`) of a law with a knee: the knees fit
        the stalls so closely that the groups' spreads are small (the example's ``tau_c2p``
        0.09 against 0.55 without), and the centred pair funnelled (a divergence in each of
        three fits, at ``tau_c2v`` 0.007–0.02; non-centred, converged in 1,200 draws)."""
        if coef in self.config.noncentered:
            return False
        if self.fixed_tau(coef) is not None:
            return True
        return not ((coef in self.contrast_noncentered and self.contrasted(coef))
                    or (coef in PAIR and self.knee_feature("c2p") is not None))

    def population(self, coef: str):
        """``coef``'s scaling law: its ``beta`` (sampled), its spread ``tau`` (sampled, or
        fixed where its level has few units), the log law of every known unit,
        ``log(x·beta)`` plus its server's deviation where the coefficient has one
        (:meth:`leveled`), and those deviations, one per server (None without)."""
        import pymc as pm
        import pytensor.tensor as pt

        priors = self.config
        x = self.x[coef]
        law = (law_coordinates(np.log(np.maximum(x.mean(axis=0), 1e-12)))
               if coef in self.law_coordinate_coefs and x.shape[1] > 1 else None)
        beta = pm.HalfNormal(f"beta_{coef}", sigma=priors.prior("beta_scale")[coef],
                             dims=f"{coef}_feature",
                             **({"transform": law, "default_transform": None} if law else {}))
        tau = self.fixed_tau(coef)
        if tau is None:
            tau = pm.Gamma(f"tau_{coef}", alpha=2.0, beta=2.0 / priors.prior("tau_mean"))
        x = self.with_knee(coef, self.units["group"], self.x[coef], self.server_idx)
        log_mu = pt.log(pt.dot(x, beta))
        if not self.leveled(coef):
            return beta, tau, log_mu, None
        if not self.contrasted(coef):  # no deviation the laws cannot make: none sampled
            return beta, tau, log_mu, pt.zeros(len(self.servers))
        contrast = pm.Normal(f"u_{coef}", 0.0, priors.prior("server_spread"),
                             dims="server_contrast")
        server = pt.dot(self.contrasts, contrast)
        return beta, tau, log_mu + server[self.server_idx], server

    def knee_feature(self, coef: str) -> str | None:
        """The feature of ``coef``'s law with a roofline knee (:data:`scaling.KNEE_FEATURE`)
        where it has one, else None."""
        return scaling.KNEE_FEATURE if scaling.KNEE_FEATURE in self.scales[coef] else None

    def knees(self):
        r"""Each server's roofline knee (tokens, dim ``server``; :func:`theory.prefill_excess`),
        :math:`\kappa_s \sim \mathrm{LogNormal}(\log m, s)`, ``(m, s)`` the ``prefill_knee``
        prior."""
        return self._knee_prior("prefill_knee", "server")

    def _knee_prior(self, name: str, dim: str):
        """The variable ``name``: knees from the ``prefill_knee`` prior (dim ``dim``), created
        on first use."""
        import pymc as pm

        model = pm.modelcontext(None)
        if name not in model.named_vars:
            median, log_sd = self.config.prior("prefill_knee")
            pm.LogNormal(name, np.log(median), log_sd, dims=dim)
        return model[name]

    def with_knee(self, coef: str, units: pd.DataFrame, x, knee_idx, fresh=None):
        """``x`` (the units' standardised features) with the knee feature's column at the
        knees of the units' servers (``knee_idx`` into :meth:`knees`, then ``fresh``: the
        knees of servers never measured); ``x`` itself where ``coef`` has no knee."""
        import pytensor.tensor as pt

        feature = self.knee_feature(coef)
        if feature is None:
            return x
        knee = self.knees() if fresh is None else pt.concatenate([self.knees(), fresh])
        column = scaling.excess_arithmetic(units["verifier_params_b"].to_numpy(float),
                                           units["prefill_tokens"].to_numpy(float),
                                           knee[knee_idx]) / self.scales[coef][feature]
        return pt.set_subtensor(pt.as_tensor(x)[:, list(self.scales[coef]).index(feature)],
                                column)

    def feature_units(self, dim: str, values: xr.Dataset) -> pd.DataFrame:
        """The units of ``dim`` with their servers' knees (``prefill_knee``: the medians of
        the draws ``values``) where the fit has knees, for the raw features of the laws
        (:func:`bayeslat.scaling.raw_features`)."""
        units = self.units[dim]
        if dim != "group" or "prefill_knee" not in values:
            return units
        knee = values["prefill_knee"]
        knee = knee.median([d for d in knee.dims if d != "server"]).sel(server=self.servers)
        return units.assign(prefill_knee=knee.to_numpy()[self.server_idx])

    def new_servers(self, new_units: pd.DataFrame) -> tuple[np.ndarray, int]:
        """Each new unit's server: its position among the fitted servers, or past them for
        the servers never measured (dim ``new_server``, added to the model), and how many of
        those there are."""
        import pymc as pm

        labels = schema.server_labels(new_units)
        idx = self.servers.get_indexer(labels)
        new = pd.Index(pd.unique(labels[idx < 0]))
        model = pm.modelcontext(None)
        if len(new) and "new_server" not in model.coords:
            model.add_coord("new_server", new.to_numpy())
        return np.where(idx >= 0, idx, len(self.servers) + new.get_indexer(labels)), len(new)

    def new_server_deviation(self, coef: str, new_units: pd.DataFrame, server):
        """The server deviation of each new unit: its server's where the fit measured it, a
        fresh draw ``N(0, server_spread)`` (dim ``new_server``) for a server never
        measured."""
        import pymc as pm
        import pytensor.tensor as pt

        idx, n_new = self.new_servers(new_units)
        if not n_new:
            return server[idx]
        fresh = pm.Normal(f"new_u_{coef}", 0.0, self.config.prior("server_spread"),
                          dims="new_server")
        return pt.concatenate([server, fresh])[idx]

    def new_knees(self, coef: str, new_units: pd.DataFrame):
        """``(knee_idx, fresh)`` of :meth:`with_knee` for new units: a server never measured
        draws its knee from the prior (``new_prefill_knee``, dim ``new_server``)."""
        if self.knee_feature(coef) is None:
            return None, None
        idx, n_new = self.new_servers(new_units)
        return idx, self._knee_prior("new_prefill_knee", "new_server") if n_new else None

    def unit_coefficient(self, coef: str, new_units: pd.DataFrame, population, log_c=None):
        """The coefficient of every known unit, then of each new unit (population + fresh
        deviation), as one vector to gather from; ``log_c`` the known units' log values where
        they were sampled with another coefficient's (:meth:`paired_logs`)."""
        import pymc as pm
        import pytensor.tensor as pt

        dim = _dim(coef)
        beta, tau, log_mu, server = population
        if log_c is None and self.centred(coef):
            log_c = pm.Normal(f"log_{coef}", mu=log_mu, sigma=tau, dims=dim)
        elif log_c is None:
            z = pm.Normal(f"z_{coef}", 0.0, 1.0, dims=dim)
            log_c = log_mu + tau * z
        value = pm.Deterministic(coef, pt.exp(log_c), dims=dim)
        if len(new_units):
            x_new, _ = scaling.standardise(new_units, self.features(coef), self.scales[coef])
            z_new = pm.Normal(f"new_z_{coef}", 0.0, 1.0, dims=f"new_{dim}")
            x_new = self.with_knee(coef, new_units, x_new, *self.new_knees(coef, new_units))
            log_new = pt.log(pt.dot(x_new, beta)) + tau * z_new
            if server is not None:
                log_new = log_new + self.new_server_deviation(coef, new_units, server)
            value = pt.concatenate([value, pt.exp(log_new)])
        return value

    def paired_logs(self, populations: dict) -> dict:
        r"""``log c2p`` and ``log c2v`` of every group, sampled together where both are
        centred: one variable ``log_c2`` (dims ``group``, ``memory``) with their independent
        normal priors, in the sampler's coordinates of :func:`memory_pair`
        (``log(c2p + g·m·c2v)``, ``log c2p − log(g·m·c2v)``), and with each group's drafter's
        ``log c2d`` in those of :func:`memory_pair` where :meth:`triple`; {} otherwise."""
        import pymc as pm
        import pytensor.tensor as pt

        if any(not self.centred(c) or c not in populations for c in PAIR):
            return {}
        (_, tau_p, mu_p, _), (_, tau_v, mu_v, _) = (populations[c] for c in PAIR)
        model = pm.modelcontext(None)
        names, mus, taus = list(PAIR), [mu_p, mu_v], [tau_p, tau_v]
        triple = self.triple()
        if triple:
            _, tau_d, mu_d, _ = populations["c2d"]
            names.append("c2d")
            mus.append(mu_d[self.group_drafts()])
            taus.append(tau_d)
        if "memory" not in model.coords:
            model.add_coord("memory", names)
        weights = np.log(self.memory_weights())
        log_c2 = pm.Normal("log_c2", mu=pt.stack(mus, axis=-1),
                           sigma=pt.stack([t * pt.ones_like(m)
                                           for t, m in zip(taus, mus, strict=True)], axis=-1),
                           dims=("group", "memory"),
                           transform=memory_pair(np.stack(
                               [weights, np.log(self.draft_weights())], axis=-1)
                               if triple else weights))
        out = {"c2p": log_c2[:, 0], "c2v": log_c2[:, 1]}
        if triple:
            out["c2d"] = log_c2[self.draft_groups(), 2]
        return out

    def triple(self) -> bool:
        """Whether ``c2d`` joins the memory pair (:func:`memory_pair`): centred with its
        spread fixed, and one drafter in every group."""
        return ("c2d" in self.coef_names and self.centred("c2d")
                and self.fixed_tau("c2d") is not None
                and len(self.units["draft"]) == len(self.units["group"])
                and len(np.unique(self.draft_groups())) == len(self.units["group"]))

    def draft_weights(self) -> np.ndarray:
        """Per group, ``g·m_d``: its decode length times the mean of ``k/E`` over its SD
        configurations, the weight of ``c2d`` in its memory slopes (:meth:`paired_logs`)."""
        cfg = self.rows.drop_duplicates("config")
        cfg = cfg[cfg["k"] > 0]
        k = cfg["k"].to_numpy(float)
        return self._decode_weights(cfg, k / theory.tokens_per_cycle(
            cfg["alpha0"].to_numpy(float), k))

    def memory_weights(self) -> np.ndarray:
        """Per group, ``g·m``: its decode length times the mean of ``1/E`` over its measured
        configurations (baseline included, ``E = 1``), the weight of ``c2v`` in the memory
        slope its data pin best (:meth:`paired_logs`)."""
        cfg = self.rows.drop_duplicates("config")
        return self._decode_weights(cfg, 1.0 / theory.tokens_per_cycle(
            cfg["alpha0"].to_numpy(float), cfg["k"].to_numpy(float)))

    def _decode_weights(self, cfg: pd.DataFrame, share: np.ndarray) -> np.ndarray:
        """Per group, its decode length times the mean of ``share`` over its configurations
        ``cfg`` (one row each)."""
        per = pd.DataFrame({"group": cfg["group"].to_numpy(), "share": share,
                            "g": cfg["decode_tokens"].to_numpy(float)}).groupby("group")
        return (per["g"].first() * per["share"].mean()).reindex(
            self.units["group"].index).to_numpy()

    def fixed_tau(self, coef: str) -> float | None:
        """The spread ``tau`` of ``coef``'s log deviations where it is fixed (``tau_mean``:
        the variant fixes it, :attr:`fixed_spread`, or its level has fewer units than the
        ``tau_min_units`` prior), None where it is sampled (or was, by a fit written before
        the prior existed)."""
        if coef in self.fixed_spread:
            return float(self.config.prior("tau_mean"))
        if (len(self.units[_dim(coef)]) >= self.config.prior("tau_min_units")
                or (self.fitted and f"tau_{coef}" in self.posterior)):
            return None
        return float(self.config.prior("tau_mean"))

    def unit_vectors(self, rows: pd.DataFrame, dim: str):
        """Every coefficient per unit (known units, then the new ones ``rows`` brings) and the
        ``group`` and ``draft`` index of each row (dim ``dim``) into those vectors."""
        import pymc as pm

        model = pm.modelcontext(None)
        sd = (rows["k"] > 0).to_numpy()
        gidx, new_groups = unit_index(rows["group"], self.units["group"].index)
        didx = np.zeros(len(rows), dtype=int)
        didx[sd], new_drafts = unit_index(rows.loc[sd, "draft"], self.units["draft"].index)
        new_units = {}
        for kind, labels in (("group", new_groups), ("draft", new_drafts)):
            new_units[kind] = rows.drop_duplicates(kind).set_index(kind).loc[labels]
            if len(labels):
                model.add_coord(f"new_{kind}", labels.to_numpy())
        index = {"group": pm.Data("group_idx", gidx, dims=dim),
                 "draft": pm.Data("draft_idx", didx, dims=dim)}
        populations = {coef: self.population(coef) for coef in self.coef_names}
        paired = self.paired_logs(populations)
        vectors = {coef: self.unit_coefficient(coef, new_units[_dim(coef)], populations[coef],
                                               paired.get(coef))
                   for coef in self.coef_names}
        return vectors, index

    def stage_coefficients(self, rows: pd.DataFrame, dim: str):
        """The coefficients of each row (dim ``dim``), gathered one column at a time."""
        vectors, index = self.unit_vectors(rows, dim)
        return {coef: vectors[coef][index[_dim(coef)]] for coef in self.coef_names}

    def coefficients(self, curves, data, dim):
        c = self.stage_coefficients(curves, dim)
        c1, c2 = theory.effective_coefficients(*(c[q] for q in scaling.COEFS), data["alpha"],
                                               data["k"], data["decode_tokens"])
        return {"C1": c1, "C2": c2}

    def known_parts(self, rows: pd.DataFrame, seed=0) -> dict | None:
        """``C1``, ``C2`` of ``rows`` (:func:`~bayeslat.models.base.prepare`) from the stored
        per-unit coefficients, when every group and drafter of ``rows`` was fitted: the same
        values the model's graph computes, without building or compiling it. None when a unit
        was never measured (its deviation is a fresh draw of the model) or the variant has
        other parts (:mod:`~bayeslat.models.moe`; :mod:`~bayeslat.models.capacity` has its
        own). ``seed`` is unused: nothing is drawn."""
        index = self.fitted_units(rows) if self.parts == ("C1", "C2") else None
        return None if index is None else self.parts_of(self.posterior, rows, *index)

    def prefill_stall(self, rows: pd.DataFrame) -> xr.DataArray:
        """Posterior draws of the prefill stall ``c2p`` (s: what one request's prefill adds to
        the requests running beside it) of each row's group (dims ``chain, draw, obs``), for
        :func:`bayeslat.theory.evenly_spaced`; NaN for a group the fit never saw."""
        gidx, _ = self.positions(prepare(rows))
        at = xr.DataArray(np.maximum(gidx, 0), dims="obs")
        stall = self.posterior["c2p"].isel(group=at).drop_vars("group", errors="ignore")
        return stall.where(xr.DataArray(gidx >= 0, dims="obs")).transpose("chain", "draw", "obs")

    def fitted_units(self, rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
        """Each row's position among the fitted groups and drafters (:meth:`parts_of`), or
        None when ``rows`` bring a group or drafter the fit never saw."""
        sd = (rows["k"] > 0).to_numpy()
        gidx, new_groups = unit_index(rows["group"], self.units["group"].index)
        didx = np.zeros(len(rows), dtype=int)
        didx[sd], new_drafts = unit_index(rows.loc[sd, "draft"], self.units["draft"].index)
        return None if len(new_groups) or len(new_drafts) else (gidx, didx)

    def positions(self, rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """Each row's position among the fitted groups and among the fitted drafters (0 for a
        baseline row, whose drafter terms vanish), for :meth:`parts_of`; -1 for a group never
        fitted."""
        return (self.units["group"].index.get_indexer(rows["group"]),
                np.maximum(self.units["draft"].index.get_indexer(rows["draft"]), 0))

    @staticmethod
    def parts_of(values: xr.Dataset, rows: pd.DataFrame, gidx: np.ndarray,
                 didx: np.ndarray) -> dict:
        """``C1``, ``C2`` (dim ``obs``) of ``rows`` from per-unit coefficients ``values``
        (posterior or prior draws, dims ``group`` and ``draft``), each row's group and drafter
        at ``gidx``, ``didx``."""
        index = {"group": xr.DataArray(gidx, dims="obs"), "draft": xr.DataArray(didx, dims="obs")}
        c = {coef: values[coef].isel({_dim(coef): index[_dim(coef)]}).drop_vars(_dim(coef))
             for coef in scaling.COEFS}
        column = {name: xr.DataArray(rows[name].to_numpy(float), dims="obs")
                  for name in ("alpha0", "k", "decode_tokens")}
        c1, c2 = theory.effective_coefficients(*(c[q] for q in scaling.COEFS), column["alpha0"],
                                               column["k"], column["decode_tokens"])
        return {"C1": c1, "C2": c2}

    # -- the feasible start --------------------------------------------------------------------
    def unit_start(self) -> dict[str, np.ndarray]:
        """Start values of the six coefficients per unit, every observed point below
        :data:`~bayeslat.models.start.MAX_LOAD` of saturation."""
        rows = self.rows
        codes, _ = pd.factorize(rows["config"])
        fits = self.config_fits(codes)
        cfg = rows.groupby(codes).first().loc[fits.index]
        cycles = st.cycles_of(cfg)
        drafted = cycles * cfg["k"].to_numpy()
        groups, drafts = self.units["group"].index, self.units["draft"].index
        out = {c: np.zeros(len(groups if _dim(c) == "group" else drafts)) for c in scaling.COEFS}
        for label in cfg["group"].unique():
            j, m = groups.get_loc(label), (cfg["group"] == label).to_numpy()
            local, local_labels = pd.factorize(cfg.loc[m, "draft"])
            n_local = len(local_labels)
            for i, (p, v, d) in enumerate((("c1p", "c1v", "c1d"), ("c2p", "c2v", "c2d"))):
                target = fits.loc[m, f"C{i + 1}"].to_numpy()
                cp, cv, cd = st.stage_coefficients(cycles[m], drafted[m], local, target, n_local)
                out[p][j], out[v][j] = cp, cv
                for li, label in enumerate(local_labels):
                    if label != "none":
                        out[d][drafts.get_loc(label)] = cd[li]
        out = {c: st.floor_positive(v) for c, v in out.items()}
        return self._feasible(out)

    def config_fits(self, codes: np.ndarray) -> pd.DataFrame:
        """``C1``, ``C2`` of each configuration (index: the factorised ``codes`` of
        :attr:`rows`) that the start's laws are fitted to: the paper's curve, linearised
        (:func:`~bayeslat.models.start.linear_fits`)."""
        rows = self.rows
        return st.linear_fits(codes, rows["rps"].to_numpy(), rows["latency_mean"].to_numpy())

    def _feasible(self, c: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Shrink each group's load coefficients until its points are below MAX_LOAD."""
        rows = self.rows
        gidx, didx = self.positions(rows)
        _, c2 = theory.effective_coefficients(
            0.0, 0.0, 0.0, c["c2p"][gidx], c["c2v"][gidx], c["c2d"][didx], rows["alpha0"],
            rows["k"], rows["decode_tokens"])
        load = pd.Series(rows["rps"].to_numpy() * np.asarray(c2)).groupby(gidx).max()
        shrink = np.minimum(1.0, st.MAX_LOAD / load.reindex(range(len(c["c2p"]))).fillna(1.0))
        shrink = shrink.to_numpy()
        c["c2p"], c["c2v"] = c["c2p"] * shrink, c["c2v"] * shrink
        c["c2d"] = c["c2d"] * shrink[self.draft_groups()]
        return c

    def draft_groups(self) -> np.ndarray:
        """Each fitted drafter's position among the fitted groups (dim ``draft`` → ``group``)."""
        return self.units["group"].index.get_indexer(
            self.rows.drop_duplicates("draft").set_index("draft").loc[
                self.units["draft"].index, "group"])

    def group_drafts(self) -> np.ndarray:
        """Each fitted group's drafter's position among the fitted drafters (dim ``group`` →
        ``draft``): the inverse of :meth:`draft_groups` where every group has one drafter
        (:meth:`triple`)."""
        return np.argsort(self.draft_groups())

    def knee_start(self, c2p: np.ndarray) -> np.ndarray:
        """Each server's knee where the start's stalls ``c2p`` (per group) put it: from the
        ratio ``r`` of its longest prompts' stall to its shortest's,
        ``(p_max − κ)/(p_min − κ) = r``, within 20–95% of its shortest prompt; the prior's
        median for a server of one prompt length."""
        units = self.units["group"]
        knees = np.full(len(self.servers), float(self.config.prior("prefill_knee")[0]))
        p = units["prefill_tokens"].to_numpy(float)
        for s in range(len(self.servers)):
            mine = self.server_idx == s
            lo, hi = p[mine].min(), p[mine].max()
            if hi > lo:
                r = np.exp(np.log(c2p[mine & (p == hi)]).mean()
                           - np.log(c2p[mine & (p == lo)]).mean())
                knee = (r * lo - hi) / (r - 1.0) if r > 1.0 else 0.0
                knees[s] = np.clip(knee, 0.2 * lo, 0.95 * lo)
        return knees

    def start(self) -> dict[str, np.ndarray]:
        from scipy.optimize import nnls

        values = self.unit_start()
        out = {}
        if any(map(self.knee_feature, self.coef_names)):
            out["prefill_knee"] = self.knee_start(values["c2p"])
        for coef in self.coef_names:
            c, x = values[coef], self.x[coef]
            if self.knee_feature(coef):  # at the start's knees
                units = self.units["group"].assign(
                    prefill_knee=out["prefill_knee"][self.server_idx])
                x, _ = scaling.standardise(units, self.features(coef), self.scales[coef])
            beta, _ = nnls(x / c[:, None], np.ones(len(c)))
            beta = st.floor_positive(beta, 0.01)
            dev = np.log(c) - np.log(x @ beta)
            if self.contrasted(coef):
                # each server's mean deviation along the contrasts, the groups' about it
                server = pd.Series(dev).groupby(self.server_idx).mean().reindex(
                    range(len(self.servers))).to_numpy()
                out[f"u_{coef}"] = self.contrasts.T @ server
                dev = dev - (self.contrasts @ out[f"u_{coef}"])[self.server_idx]
            tau = self.fixed_tau(coef)
            if tau is None:
                tau = out[f"tau_{coef}"] = float(np.clip(dev.std(), 0.05, 1.0))
            out[f"beta_{coef}"] = beta
            if not self.centred(coef):
                out[f"z_{coef}"] = dev / tau
            else:
                out[f"log_{coef}"] = np.log(c)
        if all(f"log_{c}" in out for c in PAIR):  # sampled as one (paired_logs)
            logs = [out.pop(f"log_{c}") for c in PAIR]
            if self.triple():
                logs.append(out.pop("log_c2d")[self.group_drafts()])
            out["log_c2"] = np.stack(logs, axis=-1)
        return out
