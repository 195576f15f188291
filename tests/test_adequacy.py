"""``bayeslat.adequacy``: coverage, top-load coverage, capacity against the ceiling, warnings.

The fitted model is a stand-in with a known posterior (the true ``C1``, ``C2`` of a sampled
sweep in every draw, a fixed ``sigma`` and ``nu``), so the predictive is known exactly: data drawn
from it must be covered at about the nominal rates, and data moved at the top loads must not.
"""

from __future__ import annotations

import arviz as az
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from support.point_mass import point_mass

from bayeslat import adequacy, theory
from bayeslat.errors import FitError
from bayeslat.models import sampling
from bayeslat.models.base import LatencyModel, prepare
from bayeslat.simulate.generative import SamplerSpec, sample_sweep

SPEC = SamplerSpec(prefill_tokens=(128.0, 512.0), decode_tokens=(64.0, 256.0),
                   alphas=(0.6, 0.8, 0.9), ks=(2, 4), n_rates=9)
SIGMA = 0.05


class Fitted:
    """A fitted model whose posterior is known: the same parts in every draw."""

    def __init__(self, table: pd.DataFrame, parts: dict[str, np.ndarray], *, sigma=SIGMA,
                 nu=30.0, chains=2, draws=300, ceilings=None, excluded=()):
        self.table = table.reset_index(drop=True)
        self.rows = prepare(self.table)
        self.parts = tuple(parts)
        self.by_config = {name: dict(zip(self.rows["config"], v, strict=True))
                          for name, v in parts.items()}
        shape = (chains, draws)
        # no extra scatter near the wall: the predictive scale is sigma everywhere
        self.idata = az.from_dict(posterior={"sigma": np.full(shape, sigma),
                                             "nu": np.full(shape, nu),
                                             "sigma_wall": np.zeros(shape)})
        self.excluded = list(excluded)
        if ceilings is not None:
            self.ceilings = ceilings
        self.predicted_rows = []

    def predict(self, new, seed=0):
        rows = prepare(new)
        self.predicted_rows.append(len(rows))
        post = self.idata.posterior
        shape = (post.sizes["chain"], post.sizes["draw"], len(rows))
        ds = xr.Dataset({name: (("chain", "draw", "obs"), np.broadcast_to(
            rows["config"].map(values).to_numpy(float), shape))
            for name, values in self.by_config.items()})
        ds["latency"] = self.latency(ds, rows)
        return ds.assign_coords(config=("obs", rows["config"].to_numpy()),
                                rps=("obs", rows["rps"].to_numpy()))

    scatter = LatencyModel.scatter
    protocol_shift = staticmethod(LatencyModel.protocol_shift)
    # no prefill stall (as for the variants without per-stage coefficients): the smooth curve
    prefill_stall = LatencyModel.prefill_stall
    evenly_spaced = LatencyModel.evenly_spaced
    constant_rates = LatencyModel.constant_rates
    capacity = LatencyModel.capacity
    fitted = True

    @property
    def posterior(self):
        return self.idata.posterior

    def thinned(self, max_draws, rng):
        return self

    def latency(self, parts, rows):
        rps = xr.DataArray(rows["rps"].to_numpy(), dims="obs")
        extra = [parts[n] for n in ("C3", "Q", "P") if n in parts]
        return theory.latency(rps, parts["C1"], parts["C2"], *extra).transpose(
            "chain", "draw", "obs")


def _sweep(seed=1, shift_top=0.0, nu=30.0):
    """A sweep whose latencies are drawn from the stand-in's predictive (Student-t with
    ``nu``, scale ``sqrt(SIGMA² + se_rel²)``), the top three loads of every SD configuration
    multiplied by ``exp(shift_top)``; and its true ``C1``, ``C2`` per row."""
    table, truth = sample_sweep(SPEC, seed=seed)
    c1 = np.repeat(truth.configs["C1"].to_numpy(), SPEC.n_rates)
    c2 = np.repeat(truth.configs["C2"].to_numpy(), SPEC.n_rates)
    model = theory.latency(table["rps"].to_numpy(), c1, c2)
    rows = prepare(table)
    rng = np.random.default_rng(seed + 100)
    scale = np.sqrt(SIGMA**2 + rows["se_rel"].to_numpy() ** 2)
    lat = model * np.exp(scale * rng.standard_t(nu, len(table)))
    rank = rows.groupby("config")["rps"].rank(ascending=False)
    lat = lat * np.exp(shift_top * ((rank <= 3) & (rows["k"] > 0)).to_numpy())
    table = table.assign(latency_mean=lat, latency_std=SPEC.latency_cv * lat)
    return table, c1, c2


def _first(table: pd.DataFrame) -> pd.DataFrame:
    return table.drop_duplicates(["prefill_tokens", "decode_tokens", "alpha", "k"])


def test_data_drawn_from_the_predictive_are_covered_at_the_nominal_rates():
    table, c1, c2 = _sweep()
    fitted = Fitted(table, {"C1": c1, "C2": c2})
    out = adequacy.check(fitted, seed=0)
    f = out.figures
    assert f["points"] == len(table) == 28 * 9
    # within three binomial standard deviations of nominal
    assert abs(f["coverage_90"] - 0.9) <= 3 * np.sqrt(0.09 / f["points"])
    assert abs(f["coverage_50"] - 0.5) <= 3 * np.sqrt(0.25 / f["points"])
    assert f["top_coverage_90"] >= 0.80
    assert f["sigma"] == pytest.approx(SIGMA) and f["nu"] == pytest.approx(30.0)
    assert not [w for w in out.warnings if "90% predictive" in w or "configurations" in w]
    assert f["configs_below"] <= f["configs_below_chance"]
    # one prediction per configuration, not per row
    assert fitted.predicted_rows == [28]
    # the predictive median is the model latency (symmetric scatter)
    truth = theory.latency(table["rps"].to_numpy(), c1, c2)
    np.testing.assert_allclose(out.points["median"], truth, rtol=0.02)
    assert (out.points["lo90"] < out.points["lo50"]).all()
    assert (out.points["hi50"] < out.points["hi90"]).all()
    assert out.points.groupby("config")["top"].sum().eq(3).all()
    assert out.points.loc[out.points["load_rank"] == 1, "top"].all()
    summary = out.summary()
    assert summary.set_index("figure").loc["points inside the 90% interval", "ok"]


def test_constant_rate_points_are_predicted_on_their_staircase():
    """Where the model knows each group's prefill stall, a constant-rate point's predictive
    median is the staircase of evenly spaced requests about its curve, anchored at its
    configuration's rates (theory.evenly_spaced + theory.staircase_offset), not the curve."""
    table, c1, c2 = _sweep()
    stall = 0.8 * c2

    class Stalled(Fitted):
        def prefill_stall(self, rows):
            per_row = prepare(rows)["config"].map(dict(zip(self.rows["config"], stall,
                                                            strict=True)))
            return xr.DataArray(np.broadcast_to(per_row.to_numpy(float), (2, 300, len(rows))),
                                dims=("chain", "draw", "obs"))

    out = adequacy.check(Stalled(table, {"C1": c1, "C2": c2}, sigma=1e-3), seed=0)
    rows = prepare(table)
    rps = table["rps"].to_numpy()
    smooth = theory.latency(rps, c1, c2)
    stairs = theory.evenly_spaced(smooth, rps, stall)
    offset = pd.Series(stairs - smooth).groupby(rows["config"].to_numpy()).transform("mean")
    expected = stairs - offset.to_numpy()
    assert np.abs(expected / smooth - 1).max() > 0.03  # the steps show
    np.testing.assert_allclose(out.points["median"], expected, rtol=0.005)


@pytest.mark.parametrize("shift", [0.0, 0.3])
def test_synchronous_rows_are_predicted_with_the_fitted_offset(shift):
    """Each configuration's lowest load run synchronously, its latency 0.3 (log) above the
    curve: covered where the posterior carries that offset, outside every band where not."""
    table, c1, c2 = _sweep()
    sync = table.index.isin(table.groupby(["prefill_tokens", "decode_tokens", "alpha", "k"],
                                          dropna=False)["rps"].idxmin())
    table.loc[sync, "strategy"] = "synchronous"
    table.loc[sync, ["latency_mean", "latency_std"]] *= np.exp(0.3)
    fitted = Fitted(table, {"C1": c1, "C2": c2})
    post = fitted.idata.posterior
    fitted.idata.posterior["sync_shift"] = xr.full_like(post["sigma"], shift)
    points = adequacy.check(fitted, seed=0).points
    if shift:
        truth = theory.latency(table["rps"].to_numpy(), c1, c2) * np.exp(0.3 * sync)
        np.testing.assert_allclose(points["median"], truth, rtol=0.02)
        assert points.loc[sync, "in90"].mean() >= 0.75
    else:
        assert not points.loc[sync, "in90"].any()


def test_held_out_rows_are_scored_against_the_predictive():
    """Rows the fit did not see, predicted as they come (not per configuration): drawn from
    the predictive they are covered at about the nominal rate, and ``ape`` is the median's
    error; moved by 20% they are not covered."""
    table, c1, c2 = _sweep()
    fitted = Fitted(table, {"C1": c1, "C2": c2})
    rows = table.iloc[::2].reset_index(drop=True)
    out = adequacy.held_out(fitted, rows, seed=0)
    assert len(out) == len(rows) and fitted.predicted_rows == [len(rows)]
    assert abs(out["in90"].mean() - 0.9) <= 3 * np.sqrt(0.09 / len(rows))
    np.testing.assert_allclose(out["ape"], abs(out["median"] / rows["latency_mean"] - 1))
    truth = theory.latency(rows["rps"].to_numpy(), c1[::2], c2[::2])
    np.testing.assert_allclose(out["median"], truth, rtol=0.02)
    moved = adequacy.held_out(fitted, rows.assign(latency_mean=rows["latency_mean"] * 1.2))
    assert moved["in90"].mean() < 0.2 and moved["ape"].mean() > 0.1


def test_data_moved_at_the_top_loads_lower_top_coverage_and_warn():
    table, c1, c2 = _sweep(shift_top=0.4)
    out = adequacy.check(Fitted(table, {"C1": c1, "C2": c2}), seed=0)
    f = out.figures
    sd_top = out.points[out.points["top"] & (out.points["k"] > 0)]
    assert sd_top["in90"].mean() < 0.05  # moved eight scatter widths: all outside
    assert f["top_coverage_90"] < adequacy.TOP_COVERAGE_MIN
    assert f["top_all_inside"] < 0.2  # only baselines keep their top three
    top_warning = [w for w in out.warnings if f"top {adequacy.TOP_LOADS} loads" in w]
    assert top_warning and "above" in top_warning[0]
    # every SD configuration has three of nine points out: misfit, and the worst ones are SD
    sd = out.configs[out.configs["k"] > 0]
    assert sd["misfit"].all() and (sd["inside_90"] <= 6 / 9 + 1e-9).all()
    assert set(out.misfit) >= set(sd["config"])
    worst = out.worst(5)
    assert len(worst) == 5 and (worst["k"] > 0).all() and (worst["mean_z"] > 0).all()
    assert worst["inside_90"].is_monotonic_increasing
    assert any("configurations have less than 80%" in w for w in out.warnings)
    row = out.summary().set_index("figure").loc[f"top {adequacy.TOP_LOADS} loads inside the "
                                                "90% interval"]
    assert row["ok"] is False or not row["ok"]


def test_capacity_against_a_known_ceiling():
    table, c1, c2 = _sweep()
    first = _first(table)
    c2_first = _first(table.assign(c2=c2))["c2"].to_numpy()
    # measured ceilings at half the model capacity: ratio 2 everywhere
    half = first.assign(strategy="throughput", rps=0.5 / c2_first)
    out = adequacy.check(Fitted(table, {"C1": c1, "C2": c2}, ceilings=half))
    np.testing.assert_allclose(out.configs["capacity"], 1 / c2_first)
    np.testing.assert_allclose(out.configs["capacity_ratio"], 2.0)
    assert out.figures["capacity_within"] == 0.0
    assert out.figures["capacity_ratio"] == pytest.approx(2.0)
    assert any("off the measured ceiling for 28 of 28" in w for w in out.warnings)
    # exact for all but two of 28 (7% off): no warning; three of 28 (11%): a warning
    for wrong, warned in ((2, False), (3, True)):
        rps = 1 / c2_first
        rps[:wrong] *= 0.5
        out = adequacy.check(Fitted(table, {"C1": c1, "C2": c2}, ceilings=first.assign(rps=rps)))
        assert out.figures["capacity_within"] == pytest.approx(1 - wrong / 28)
        assert any("measured ceiling" in w for w in out.warnings) is warned


def test_capacity_is_set_by_the_larger_of_c2_and_c3():
    table, c1, c2 = _sweep()
    c3 = 2.0 * c2
    first = _first(table.assign(c3=c3))
    ceilings = first.assign(rps=1.0 / first["c3"]).drop(columns="c3")
    fitted = Fitted(table, {"C1": c1, "C2": c2, "C3": c3, "Q": np.zeros_like(c1),
                            "P": theory.soft_power(table["k"].to_numpy(float))},
                    ceilings=ceilings)
    out = adequacy.check(fitted)
    np.testing.assert_allclose(out.configs["capacity_ratio"], 1.0)
    assert out.figures["capacity_within"] == 1.0
    assert not any("ceiling" in w for w in out.warnings)


def test_without_ceilings_they_come_from_the_excluded_throughput_rows():
    table, c1, c2 = _sweep()
    first = prepare(_first(table))
    base = first[first["k"] == 0].iloc[0]
    sd = first[first["k"] > 0].iloc[0]
    excluded = [f"{base['config']} rps=12.5 (throughput strategy (measures the ceiling))",
                f"{sd['config']} rps=9 (throughput strategy (measures the ceiling); achieved "
                "rate below 80% of target)",
                f"{sd['config']} rps=3 (achieved rate below 80% of target)", "odd line"]
    fitted = Fitted(table, {"C1": c1, "C2": c2}, excluded=excluded)
    ceilings = adequacy.measured_ceilings(fitted)
    assert ceilings.to_dict() == {base["config"]: 12.5, sd["config"]: 9.0}
    assert adequacy.group_ceilings(fitted) == {base["group"]: 12.5}
    out = adequacy.check(fitted)
    assert out.figures["capacity_configs"] == 2
    assert out.configs["ceiling"].notna().sum() == 2
    none = adequacy.check(Fitted(table, {"C1": c1, "C2": c2}))
    assert none.figures["capacity_configs"] == 0 and np.isnan(none.figures["capacity_within"])
    assert none.summary().set_index("figure").iloc[5]["target"] == "no measured ceiling"
    assert not any("ceiling" in w for w in none.warnings)


def test_low_nu_warns_that_misfit_is_taken_for_outliers():
    table, c1, c2 = _sweep()
    out = adequacy.check(Fitted(table, {"C1": c1, "C2": c2}, nu=2.0))
    assert any("outliers" in w and "2.00" in w for w in out.warnings)
    fine = adequacy.check(Fitted(table, {"C1": c1, "C2": c2}, nu=30.0))
    assert not any("outliers" in w for w in fine.warnings)


def test_predictive_draws_have_the_likelihood_scale_and_are_seeded():
    lat = xr.DataArray(np.full((2, 4000, 3), 2.0), dims=("chain", "draw", "obs"))
    lat[:, :, 2] = np.inf
    scale = xr.DataArray([0.1, np.hypot(0.1, 0.2), 0.1], dims="obs")
    nu = xr.DataArray(np.full((2, 4000), 1e6), dims=("chain", "draw"))
    out = adequacy.predictive_log_latency(lat, scale, nu, seed=3)
    assert out.shape == lat.shape
    assert np.isfinite(out).all() and (out[:, :, 2] > 1e5).all()
    resid = out[:, :, :2] - np.log(2.0)
    assert resid[:, :, 0].std() == pytest.approx(0.1, rel=0.05)
    assert resid[:, :, 1].std() == pytest.approx(np.hypot(0.1, 0.2), rel=0.05)
    np.testing.assert_array_equal(out, adequacy.predictive_log_latency(lat, scale, nu, seed=3))
    assert not np.array_equal(out, adequacy.predictive_log_latency(lat, scale, nu, seed=4))


def test_an_unfitted_model_is_a_fit_error():
    class Unfitted:
        fitted = False

    with pytest.raises(FitError, match="not fitted"):
        adequacy.check(Unfitted())


def test_a_real_model_with_mocked_draws_is_checked(monkeypatch):
    import pymc as pm
    from pymc.testing import mock_sample

    from bayeslat.models import get

    monkeypatch.setattr(pm, "sample", mock_sample)
    table, _ = sample_sweep(SamplerSpec(prefill_tokens=(128.0,), decode_tokens=(64.0,),
                                        alphas=(0.8,), ks=(2,), n_rates=4), seed=2)
    model = get("dense")(table)
    sampling.sample(model, draws=10, chains=2, sampler="pymc", progressbar=False)
    out = adequacy.check(model, seed=1)
    assert len(out.points) == len(table) and len(out.configs) == 2
    assert out.points[["in50", "in90"]].dtypes.eq(bool).all()
    assert (out.configs["capacity"] > 0).all()
    assert out.points["lo90"].le(out.points["hi90"]).all()


def test_one_configuration_far_off_warns_though_chance_could_give_the_count():
    table, c1, c2 = _sweep()
    rows = prepare(table)
    far = (rows["config"] == rows.loc[rows["k"] > 0, "config"].iloc[0]).to_numpy()
    moved = table.assign(latency_mean=table["latency_mean"] * np.where(far, 1.5, 1.0))
    out = adequacy.check(Fitted(moved, {"C1": c1, "C2": c2}))
    f = out.figures
    assert f["config_coverage_min"] < adequacy.CONFIG_COVERAGE_FLOOR
    assert out.worst(1)["config"].iloc[0] == rows.loc[far, "config"].iloc[0]
    assert any(rows.loc[far, "config"].iloc[0] in w for w in out.warnings)


# -- bayeslat fit prints the adequacy ----------------------------------------------------------


@pytest.fixture()
def misfit_sweep(tmp_path):
    """A sampled sweep whose SD configurations rise 50% above their curve at the top three
    loads, with throughput benchmarks measuring half the true capacity."""
    from bayeslat.data import schema

    spec = SamplerSpec(prefill_tokens=(128.0, 512.0), decode_tokens=(64.0,), alphas=(0.6, 0.9),
                       ks=(2, 4), n_rates=9)
    table, truth = sample_sweep(spec, seed=1)
    rank = table.groupby(schema.config_labels(table))["rps"].rank(ascending=False)
    factor = np.where((rank <= 3) & (table["k"] > 0), 1.5, 1.0)
    table = table.assign(latency_mean=table["latency_mean"] * factor,
                         latency_std=table["latency_std"] * factor)
    first = table.drop_duplicates(["prefill_tokens", "decode_tokens", "alpha", "k"])
    ceiling = first.assign(strategy="throughput", rate_target=np.nan,
                           rps=0.5 / truth.configs["C2"].to_numpy(), saturated=True,
                           saturation_reason="throughput strategy (measures the ceiling)",
                           source=[f"throughput#{i}" for i in range(len(first))])
    path = tmp_path / "misfit.parquet"
    schema.write_table(pd.concat([table, ceiling], ignore_index=True), path)
    return path


def test_fit_prints_the_adequacy_and_warns_on_misfit_data(misfit_sweep, tmp_path, monkeypatch):
    import pymc as pm
    from typer.testing import CliRunner

    from bayeslat.cli import app

    monkeypatch.setattr(pm, "sample", point_mass)
    result = CliRunner().invoke(app, ["fit", str(misfit_sweep), "--sampler", "pymc",
                                      "--draws", "20", "--chains", "2", "--model", "dense",
                                      "-o", str(tmp_path / "fit.nc")])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "Adequacy" in out and "points inside the 90% interval" in out
    assert "Worst configurations" in out
    assert "warning: only" in out and f"top {adequacy.TOP_LOADS} loads" in out
    assert "off the measured" in out
    # the summary comes after the convergence table and before the headline
    assert out.index("max R-hat") < out.index("Adequacy") < out.index("RPS*")
    assert max(len(line) for line in out.splitlines()) <= 120
