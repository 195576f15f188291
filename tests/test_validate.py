"""``bayeslat validate``: the folds of each split, the scores, and the verb with a mocked
sampler (the real fits are in test_fit_slow.py)."""

import json

import numpy as np
import pandas as pd
import pymc as pm
import pytest
from pymc.testing import mock_sample
from typer.testing import CliRunner

from bayeslat import validate
from bayeslat.cli import app
from bayeslat.data import schema
from bayeslat.errors import InputError
from bayeslat.simulate.generative import SamplerSpec, sample_sweep

runner = CliRunner()
SPEC = SamplerSpec(prefill_tokens=(128.0, 512.0), decode_tokens=(64.0, 128.0),
                   alphas=(0.6, 0.9), ks=(2, 4), n_rates=4)


@pytest.fixture(scope="module")
def table():
    return sample_sweep(SPEC, seed=1)[0]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, table):
    path = tmp_path_factory.mktemp("data") / "sweep.parquet"
    schema.write_table(table, path)
    return path


@pytest.fixture()
def mocked(monkeypatch):
    monkeypatch.setattr(pm, "sample", mock_sample)


def test_top_rate_holds_out_each_configuration_s_highest_constant_rate(table):
    (fold,) = validate.folds(table, "top-rate")
    held = table[fold.drop]
    labels = schema.config_labels(table)
    assert held["strategy"].eq("constant").all() and not held["saturated"].any()
    assert len(held) == labels.nunique()
    constant = table[(table["strategy"] == "constant") & ~table["saturated"]]
    top = constant.groupby(schema.config_labels(constant))["rps"].max()
    assert held.set_index(schema.config_labels(held).to_numpy())["rps"].equals(
        top.reindex(schema.config_labels(held).to_numpy()))


def test_rate_leaves_out_each_constant_rate_once_rank_by_rank(table):
    folds = validate.folds(table, "rate")
    labels = schema.config_labels(table)
    constant = ((table["strategy"] == "constant") & ~table["saturated"]).to_numpy()
    assert len(folds) == table[constant].groupby(labels[constant]).size().max() >= 2
    drops = np.array([f.drop for f in folds])
    # every unsaturated constant rate held out exactly once, nothing else ever
    assert (drops.sum(axis=0) == constant).all()
    previous = None
    for fold in folds:
        held = table[fold.drop].set_index(labels[fold.drop].to_numpy())["rps"]
        assert held.index.is_unique  # one rate per configuration and fold
        if previous is not None:  # each configuration's next rate up
            both = held.index.intersection(previous.index)
            assert len(both) and (held[both] > previous[both]).all()
        previous = held
    # the lowest fold holds each configuration's lowest rate, the last only top rates
    lowest = table[constant].groupby(labels[constant])["rps"].min()
    assert table[folds[0].drop].groupby(labels[folds[0].drop])["rps"].min().equals(lowest)
    (top,) = validate.folds(table, "top-rate")
    assert (folds[-1].drop <= top.drop).all()


@pytest.mark.parametrize("split", ["top-rate", "rate"])
def test_a_poisson_sweep_s_rates_are_held_out_as_constant_ones_are(table, split):
    """GuideLLM's poisson profile gives the load curves' points as its constant profile does."""
    poisson = table.assign(strategy=table["strategy"].replace("constant", "poisson"))
    drops = [[f.drop for f in validate.folds(t, split)] for t in (table, poisson)]
    assert len(drops[0]) == len(drops[1]) >= 1
    assert all((a == b).all() and a.any() for a, b in zip(*drops, strict=True))


def test_rate_refuses_a_sweep_with_one_rate_per_configuration(table):
    constant = table["strategy"] == "constant"
    lowest = table["rps"].where(constant).groupby(schema.config_labels(table)).transform("min")
    one = table[table["rps"].eq(lowest) | ~constant]  # each configuration's lowest rate only
    assert one["strategy"].eq("constant").sum() == schema.config_labels(table).nunique()
    with pytest.raises(InputError, match="two or more constant or Poisson rates"):
        validate.folds(one.reset_index(drop=True), "rate")


@pytest.mark.parametrize(("split", "column", "n"), [("alpha", "alpha", 2), ("k", "k", 2)])
def test_sd_splits_hold_out_one_value_of_the_sd_rows_and_keep_every_baseline(
        table, split, column, n):
    folds = validate.folds(table, split)
    assert len(folds) == n
    drops = np.array([f.drop for f in folds])
    assert (drops.sum(axis=0) <= 1).all()  # disjoint
    sd = (table["k"] > 0).to_numpy()
    assert (drops.any(axis=0) == sd).all()  # every SD row once, no baseline row
    for f in folds:
        assert table.loc[f.drop, column].nunique() == 1
        # saturated rows leave with their configuration, but are not scored
        assert f.scored(table).sum() == (f.drop & ~table["saturated"].to_numpy()).sum()


def test_workload_split_holds_out_whole_groups_with_their_baselines(table):
    folds = validate.folds(table, "workload")
    assert [f.held_out for f in folds] == ["p128 g64", "p128 g128", "p512 g64", "p512 g128"]
    for f in folds:
        held = table[f.drop]
        assert held[["prefill_tokens", "decode_tokens"]].drop_duplicates().shape[0] == 1
        assert (held["k"] == 0).any()
        rest = table[~f.drop]
        assert not set(schema.group_labels(held)) & set(schema.group_labels(rest))


def _grid(prefills, decodes, alphas=(0.6,), ks=(2,)):
    """A table of one row per (workload, configuration): the columns the folds read."""
    rows = [{"verifier": "v", "hardware": "H", "drafter": "none" if k == 0 else "d",
             "prefill_tokens": float(p), "decode_tokens": float(g), "k": k,
             "alpha": np.nan if k == 0 else a}
            for p in prefills for g in decodes
            for a, k in [(np.nan, 0)] + [(a, k) for a in alphas for k in ks]]
    return pd.DataFrame(rows)


def test_workloads_held_out_together_leave_each_length_measured(table):
    folds = validate.folds(table, "workload-2")
    assert [f.held_out for f in folds] == ["p128 g64 + p512 g128", "p128 g128 + p512 g64"]
    assert (np.array([f.drop for f in folds]).sum(axis=0) == 1).all()  # every row once
    for f in folds:
        held, rest = table[f.drop], table[~f.drop]
        assert held[["prefill_tokens", "decode_tokens"]].drop_duplicates().shape[0] == 2
        for column in ("prefill_tokens", "decode_tokens"):
            assert set(held[column]) <= set(rest[column])
    # the paper's 4 x 4 grid, four at a time: a Latin square of folds
    sets = validate.workload_sets(_grid([128, 256, 512, 1024], [64, 128, 256, 512]), 4)
    assert len(sets) == 4 and sorted(sum(sets, [])) == sorted(set(sum(sets, [])))
    for names in sets:
        assert len({n.split()[0] for n in names}) == len({n.split()[1] for n in names}) == 4
    with pytest.raises(InputError, match="holding out 4 at a time"):
        validate.folds(table, "workload-4")  # all four workloads: nothing left
    with pytest.raises(InputError, match="whole number"):
        validate.folds(table, "workload-two")


def test_the_budget_split_measures_a_third_with_every_alpha_and_k():
    grid = _grid([256, 1024], [128, 512], alphas=(0.6, 0.75, 0.9), ks=(1, 2, 4, 6))
    kept = validate.budget_kept(grid)
    assert kept[grid["k"] == 0].all()  # every baseline measured
    sd = grid[(grid["k"] > 0) & kept]
    for _, group in sd.groupby(["prefill_tokens", "decode_tokens"]):
        assert len(group) == 4  # of 12
        assert set(group["alpha"]) == {0.6, 0.75, 0.9} and set(group["k"]) == {1, 2, 4, 6}
    (fold,) = validate.folds(grid.assign(saturated=False), "budget")
    assert (fold.drop == ((grid["k"] > 0) & ~kept)).all()


def test_verifier_split_holds_out_everything_measured_with_a_verifier(table):
    with pytest.raises(InputError, match="1 value"):  # one verifier: nothing to learn from
        validate.folds(table, "verifier")
    two = sample_sweep(SamplerSpec(**{**SPEC.__dict__, "verifiers": (
        ("llama-70b", 70.0), ("llama-8b", 8.0))}), seed=2)[0]
    folds = validate.folds(two, "verifier")
    assert [f.held_out for f in folds] == ["llama-8b", "llama-70b"]  # by size
    for f in folds:
        assert (two.loc[f.drop, "verifier"] == f.held_out).all()
        assert (two.loc[~f.drop, "verifier"] != f.held_out).all()


def test_a_split_with_one_value_or_an_unknown_name_is_refused(table):
    one_alpha = table[(table["k"] == 0) | (table["alpha"] == 0.6)]
    with pytest.raises(InputError, match="1 value"):
        validate.folds(one_alpha, "alpha")
    with pytest.raises(InputError, match="unknown split"):
        validate.folds(table, "rates")


def test_scores_are_mape_r2_and_coverage_of_the_median():
    points = pd.DataFrame({"latency_mean": [1.0, 2.0, 4.0, 8.0],
                           "median": [1.1, 1.8, 4.0, np.inf],
                           "ape": [0.1, 0.1, 0.0, np.inf],
                           "in50": [True, False, True, False],
                           "in90": [True, True, True, False]})
    s = validate.score(points.iloc[:3])
    assert s["mape"] == pytest.approx(0.2 / 3) and s["points"] == 3
    y = np.array([1.0, 2.0, 4.0])
    assert s["r2"] == pytest.approx(1 - 0.05 / ((y - y.mean()) ** 2).sum())
    assert (s["inside_50"], s["inside_90"], s["saturated"]) == (pytest.approx(2 / 3), 1.0, 0)
    with_saturated = validate.score(points)  # a median past saturation: counted apart
    assert with_saturated["saturated"] == 1 and with_saturated["mape"] == s["mape"]
    # one median far past the truth makes the mean, not the median
    wall = validate.score(points.iloc[:3].assign(median=[1.1, 1.8, 400.0], ape=[0.1, 0.1, 99.0]))
    assert wall["mape"] == pytest.approx(99.2 / 3) and wall["mdape"] == pytest.approx(0.1)


def test_the_paper_s_point_fit_predicts_measured_configurations_only(table):
    (top,) = validate.folds(table, "top-rate")
    train, test = table[~top.drop], table[top.scored(table)]
    pred = validate.point_fit(train, test)
    # the model sampler's own curves (2% scatter): a held-out top rate within a few percent
    ape = np.abs(pred / test["latency_mean"].to_numpy() - 1)
    assert np.isfinite(pred).all() and np.median(ape) < 0.1, ape
    unseen = validate.point_fit(train[train["k"] != 4], test)
    assert np.isnan(unseen[(test["k"] == 4).to_numpy()]).all()
    assert np.isfinite(unseen[(test["k"] != 4).to_numpy()]).all()
    scores = validate.score(pd.DataFrame({
        "latency_mean": [1.0, 1.0, 1.0], "median": [1.0, 1.0, 1.0], "ape": [0.0] * 3,
        "in50": [True] * 3, "in90": [True] * 3, "point_fit": [1.2, np.inf, np.nan]}))
    assert scores["point_mape"] == pytest.approx(0.2)
    assert (scores["point_answered"], scores["point_saturated"]) == (2, 1)


def test_the_paper_s_six_coefficients_predict_draft_lengths_never_measured(table):
    (k4,) = [f for f in validate.folds(table, "k") if f.held_out == "k = 4"]
    train, test = table[~k4.drop], table[k4.scored(table)]
    pred = validate.coefficient_fit(train, test)
    # the model sampler draws from the paper's model itself (2% scatter): the six
    # coefficients fitted on k = 2 and the baseline predict k = 4 within a few percent
    ape = np.abs(pred / test["latency_mean"].to_numpy() - 1)
    assert np.isfinite(pred).all() and np.median(ape) < 0.05, np.median(ape)
    # a workload never measured: no group to take the coefficients from
    unseen = (test["prefill_tokens"] == 512).to_numpy()
    pred = validate.coefficient_fit(train[train["prefill_tokens"] != 512], test)
    assert np.isnan(pred[unseen]).all() and np.isfinite(pred[~unseen]).all()


def test_run_scores_every_fold_and_writes_its_json(table, tmp_path, mocked):
    result = validate.run(table, "hierarchical", ["k"], sampler="pymc", draws=10, chains=2,
                          progressbar=False)
    assert list(result.folds["held_out"]) == ["k = 2", "k = 4"]
    scored = sum(f.scored(table).sum() for f in validate.folds(table, "k"))
    assert len(result.points) == scored == result.splits.loc[0, "points"]
    assert not result.folds["converged"].any()  # prior draws: a mocked fit cannot converge
    path = validate.write_json(tmp_path / "v.json", [result])
    doc = json.loads(path.read_text())
    (one,) = doc["variants"]
    assert one["variant"] == "hierarchical" and len(one["points"]) == scored
    assert one["loo"] is None and doc["comparison"] is None and doc["choice"] is None
    assert {"mape", "r2", "inside_50", "inside_90", "converged", "max_rhat", "min_ess_bulk",
            "min_ess_tail", "point_mape", "point_answered"} <= set(one["folds"][0])
    assert (result.folds["point_answered"] == 0).all()  # a k never measured: no point fit
    assert (result.folds["coef_answered"] == result.folds["points"]).all()  # the six do
    with pytest.raises(InputError, match="exists"):
        validate.write_json(path, [result])


def test_folds_refitted_two_at_a_time_give_what_one_at_a_time_gives(table, mocked):
    statuses = []
    kwargs = dict(sampler="pymc", draws=10, chains=2, progressbar=False)
    one = validate.run(table, "hierarchical", ["k", "alpha"], jobs=1, **kwargs)
    two = validate.run(table, "hierarchical", ["k", "alpha"], jobs=2, status=statuses.append,
                       **kwargs)
    assert list(two.folds["held_out"]) == ["k = 2", "k = 4", "alpha 0.6", "alpha 0.9"]
    pd.testing.assert_frame_equal(one.points, two.points)
    pd.testing.assert_frame_equal(one.decisions, two.decisions)
    pd.testing.assert_frame_equal(one.folds.drop(columns="seconds"),
                                  two.folds.drop(columns="seconds"))
    assert "hierarchical: 4 folds, 2 at a time" in statuses
    assert statuses[-1] == "hierarchical: fold 4 of 4 done (alpha, without alpha 0.9)"


def test_each_fold_s_decisions_are_scored_against_the_whole_sweep_s(table, mocked):
    result = validate.run(table, "hierarchical", ["alpha"], sampler="pymc", draws=20,
                          chains=2, progressbar=False)
    cells = result.decisions
    assert set(cells["held_out"]) == {"alpha 0.6", "alpha 0.9"}
    k = cells[(cells["kind"] == "k_star") & (cells["held_out"] == "alpha 0.6")]
    # every setup of the held-out alpha (4 workloads, one drafter) on its 12-load grid
    assert len(k) == 4 * 12 and set(k["alpha"]) == {0.6}
    assert set(k["fold"].dropna()) <= {0, 2, 4} and set(k["full"].dropna()) <= {0, 2, 4}
    fold = result.folds.set_index("held_out").loc["alpha 0.6"]
    assert fold["k_cells"] == len(k) and fold["k_agree"] == pytest.approx(k["agree"].mean())
    assert (k.loc[k["agree"], "regret"].dropna() == 0).all()  # the same k: no regret
    star = cells[cells["kind"] == "rps_star"]
    assert set(star["k"]) <= {2, 4}
    assert (star["agree"] == (star["error"] <= validate.RPS_STAR_TOLERANCE)).all()
    split = result.splits.set_index("split").loc["alpha"]
    assert split["k_cells"] == 2 * 4 * 12


def test_the_whole_sweep_s_decisions_are_computed_once_for_every_fold(table, mocked,
                                                                      monkeypatch):
    calls = []
    original = validate.decision_cells

    def counted(model, table, held, loads, seed=0):
        calls.append(int(held.sum()))
        return original(model, table, held, loads, seed)

    monkeypatch.setattr(validate, "decision_cells", counted)
    validate.run(table, "hierarchical", ["k"], sampler="pymc", draws=10, chains=2,
                 progressbar=False, jobs=1)
    folds = validate.folds(table, "k")
    # the whole sweep's at every SD row, then one per fold at its own rows
    assert calls == [int((table["k"] > 0).sum())] + [int(f.drop.sum()) for f in folds]


def test_decision_score_counts_agreeing_cells_and_rps_star_within_tolerance():
    k_fold = pd.DataFrame({"setup": ["a"] * 4, "alpha": [0.6] * 4, "rps": [0.0, 1.0, 2.0, 3.0],
                           "k_risk": [4, 4, 2, 0]})
    # the whole sweep's expected latency per k at each cell: k = 4 is 2% slower than its k = 2
    k_full = k_fold.assign(k_risk=[4, 2, 2, 0], latency_k0=[3.0] * 4, latency_k2=[1.0] * 4,
                           latency_k4=[1.0, 1.02, 1.1, 1.1])
    s_fold = pd.DataFrame({"setup": ["a"] * 3, "alpha": [0.6] * 3, "k": [1, 2, 4],
                           "rps_star": [10.0, 20.0, np.nan], "p_break_even": [0.9, 0.9, 0.1]})
    s_full = s_fold.assign(rps_star=[10.5, 30.0, 5.0], p_break_even=[0.9, 0.9, 0.9])
    scores, cells = validate.decision_score((k_fold, s_fold), (k_full, s_full))
    assert scores["k_cells"] == 4 and scores["k_agree"] == 0.75
    assert scores["k_regret_max"] == pytest.approx(0.02)  # the fold's 4 where the sweep's is 2
    assert scores["k_regret_mean"] == pytest.approx(0.005)
    # k = 4: RPS* exists in most draws of the full fit only: not a pair, a disagreement
    assert scores["rps_star_pairs"] == 2 and scores["rps_star_within"] == 0.5
    assert scores["rps_star_error"] == pytest.approx((0.05 / 1.05 + 1 / 3) / 2)
    assert scores["rps_star_exists_agree"] == pytest.approx(2 / 3)
    assert list(cells["kind"]) == ["k_star"] * 4 + ["rps_star"] * 2
    # a baseline-only sweep holds out no SD rows: nothing compared, nothing made up
    scores, cells = validate.decision_score((k_fold.iloc[:0], s_fold.iloc[:0]),
                                            (k_full.iloc[:0], s_full.iloc[:0]))
    assert cells.empty and scores["k_cells"] == scores["rps_star_pairs"] == 0
    assert np.isnan(scores["k_agree"]) and np.isnan(scores["rps_star_within"])


def test_loo_fits_the_whole_sweep_once_and_compares_variants(table, mocked):
    results = [validate.run(table, variant, ["loo"], sampler="pymc", draws=20, chains=2,
                            progressbar=False) for variant in ("hierarchical", "dense")]
    measured = int((~table["saturated"]).sum())
    for result in results:
        assert result.folds.empty and result.points.empty and result.splits.empty
        assert result.loo["points"] == measured and np.isfinite(result.loo["elpd_loo"])
        assert 0 <= result.loo["pareto_k_over_1"] <= result.loo["pareto_k_over_07"] <= measured
        assert result.loo["converged"] is False  # prior draws
    comparison = validate.compare(results)
    assert list(comparison["rank"]) == [0, 1]
    assert set(comparison["variant"]) == {"hierarchical", "dense"}
    assert comparison["elpd_loo"].is_monotonic_decreasing
    assert comparison["elpd_diff"].iloc[0] == 0 and comparison["elpd_diff"].iloc[1] >= 0
    with pytest.raises(InputError, match="two or more"):
        validate.compare(results[:1])


def _ranking(diff, dse, shaky=(0, 0), converged=True):
    return pd.DataFrame({"variant": ["capacity", "hierarchical"], "rank": [0, 1],
                         "elpd_loo": [10.0, 10.0 - diff], "se": [3.0, 3.0], "p_loo": [5.0, 4.0],
                         "elpd_diff": [0.0, diff], "dse": [0.0, dse], "points": [100, 100],
                         "pareto_k_over_07": list(shaky), "pareto_k_over_1": [0, 0],
                         "converged": [True, converged]})


def test_the_choice_names_a_variant_only_when_its_lead_is_clear():
    assert validate.choice(_ranking(30.0, 5.0)).startswith("PSIS-LOO prefers capacity")
    close = validate.choice(_ranking(6.0, 5.0))
    assert close.startswith("no clear choice") and "6.0 ± 5.0" in close
    shaky = validate.choice(_ranking(30.0, 5.0, shaky=(7, 0)))
    assert "unreliable at 7 of 100 points of capacity" in shaky and "hierarchical" not in (
        shaky.split("unreliable")[1])
    assert "converge" not in shaky
    assert validate.choice(_ranking(30.0, 5.0, converged=False)).endswith(
        "the fit of hierarchical did not converge: refit with more draws before relying on this")


def test_the_verb_prints_a_table_per_split_and_refuses_to_overwrite(sweep, tmp_path, mocked):
    out = tmp_path / "v.json"
    args = ["validate", str(sweep), "--split", "top-rate", "--sampler", "pymc", "--draws", "10",
            "--chains", "2", "-o", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Held out: top-rate" in result.output and "did not converge" in result.output
    assert "curve" in result.output and "6 coef." in result.output
    # the page beside the JSON: one file, scores first, figures embedded, nothing fetched
    page = (tmp_path / "v.html").read_text(encoding="utf-8")
    assert page.index("Held-out scores per split") < page.index("Every fold")
    assert "did not converge" in page.split("<nav>")[0]  # an alert above the contents
    for alt in ("held-out points hierarchical", "coverage by load hierarchical"):
        assert f'<img alt="{alt}" src="data:image/png;base64,' in page
    assert "http" not in page.replace("http-equiv", "") and page.count("<script") == 1
    before = out.read_bytes()
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "--overwrite" in again.output and "v.html" in again.output
    assert out.read_bytes() == before
    (tmp_path / "v.html").unlink()  # the JSON alone is refused too, the page not rewritten
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and str(out) in again.output
    assert out.read_bytes() == before and not (tmp_path / "v.html").exists()


def test_the_verb_compares_variants_by_loo(sweep, tmp_path, mocked):
    out = tmp_path / "v.json"
    # auto: what bayeslat fit chooses, here (no throughput benchmark) the paper's model
    result = runner.invoke(app, ["validate", str(sweep), "--model", "auto,dense",
                                 "--split", "loo", "--sampler", "pymc", "--draws", "20",
                                 "--chains", "2", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "PSIS-LOO of the whole sweep" in result.output and "Held out" not in result.output
    assert "PSIS-LOO prefers" in result.output or "no clear choice" in result.output
    doc = json.loads(out.read_text())
    assert [v["variant"] for v in doc["variants"]] == ["hierarchical", "dense"]
    assert len(doc["comparison"]) == 2 and doc["choice"]


def test_a_per_configuration_variant_is_refused_splits_of_whole_configurations(table):
    with pytest.raises(InputError, match="only configurations it was fitted on"):
        validate.run(table, "dense", ["top-rate", "k"], sampler="pymc", draws=10)


@pytest.mark.parametrize(("args", "message"), [
    (["--split", "rates"], "unknown split"),
    (["--split", "workload-4"], "holding out 4 at a time"),
    (["--model", "gaussian"], "unknown model"),
    (["--model", "hierarchical,gaussian"], "unknown model"),
    (["--model", "dense", "--split", "k"], "only configurations it was fitted on"),
])
def test_bad_options_are_one_line_errors_before_any_fit(sweep, tmp_path, args, message):
    result = runner.invoke(app, ["validate", str(sweep), "-o", str(tmp_path / "v.json"), *args])
    assert result.exit_code == 2 and message in result.output
    assert "Traceback" not in result.output and not (tmp_path / "v.json").exists()


@pytest.fixture()
def calibrated(monkeypatch):
    """``calibration.run`` replaced by uniform ranks of three quantities and one biased one
    (the real refits are in test_calibration.py)."""
    from bayeslat import calibration

    def fake(variant, fits, **kwargs):
        rng = np.random.default_rng(0)
        ranks = pd.DataFrame({name: rng.integers(0, 101, fits) for name in
                              ("sigma", "tau_c1p", "beta_c2p[intercept]")})
        ranks["nu"] = np.minimum(rng.integers(0, 101, fits), rng.integers(0, 101, fits))
        convergence = pd.DataFrame({"max_rhat": np.full(fits, 1.004), "min_ess_bulk": 300.0,
                                    "min_ess_tail": 280.0, "divergences": 0, "seconds": 9.0})
        return calibration.Calibration(variant, ranks, convergence, 100, 0.6, 45.0)

    monkeypatch.setattr(calibration, "run", fake)


def test_the_sbc_check_prints_and_pages_each_quantity_s_uniformity(sweep, tmp_path,
                                                                     calibrated):
    out = tmp_path / "v.json"
    result = runner.invoke(app, ["validate", str(sweep), "--split", "sbc", "--sbc-fits", "60",
                                 "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "Simulation-based calibration of hierarchical: 60 refits" in result.output
    assert "Held out" not in result.output
    (one,) = json.loads(out.read_text())["variants"]
    check = {r["quantity"]: r["passes"] for r in one["sbc"]["uniformity"]}
    assert check == {"sigma": True, "tau_c1p": True, "beta_c2p[intercept]": True, "nu": False}
    assert len(one["sbc"]["ranks"]["nu"]) == 60
    page = (tmp_path / "v.html").read_text(encoding="utf-8")
    assert "simulation-based calibration fails for nu" in page.split("<nav>")[0]
    assert '<img alt="sbc hierarchical" src="data:image/png;base64,' in page


def test_the_sbc_check_refuses_a_variant_it_cannot_calibrate(table):
    with pytest.raises(InputError, match="sbc check"):
        validate.run(table, "dense", ["sbc"])


def test_a_split_the_point_methods_cannot_answer_keeps_its_labels_at_120_columns():
    """Whole verifiers held out (the example's figures): the paper's point methods answer
    none of the points, so their columns go and the caption says why; a fold's label stays
    visible at the 120 columns of a piped terminal, with its points past capacity, an R² far
    below zero and a MAPE in the thousands (a median predicted just below its wall: the
    capacity variant's workload fold p256 g128 had 1.6e32) written short, the median APE
    beside."""
    from types import SimpleNamespace

    from rich.console import Console

    from bayeslat.cli.validate import _split_table

    nan = float("nan")
    fold = {"split": "verifier", "points": 520, "point_mape": nan, "point_answered": 0,
            "point_saturated": 0, "coef_mape": nan, "coef_answered": 0, "coef_saturated": 0,
            "k_agree": 0.62, "k_regret_mean": 0.012, "rps_star_pairs": 0,
            "rps_star_within": nan, "converged": True, "seconds": 16.0}
    folds = pd.DataFrame([
        fold | {"held_out": "llama-1b", "mape": 1.557e32, "mdape": 0.146, "r2": -290147.3,
                "inside_50": 0.0, "inside_90": 0.03, "saturated": 53},
        fold | {"held_out": "llama-70b-fp8", "mape": 1.55, "mdape": 0.9, "r2": -10.94,
                "inside_50": 0.01, "inside_90": 0.34, "saturated": 0}])
    splits = pd.DataFrame([fold | {"mape": 7.8e31, "mdape": 0.5, "r2": -2450.4,
                                   "inside_50": 0.05, "inside_90": 0.45, "saturated": 53}])
    result = SimpleNamespace(variant="hierarchical", folds=folds, splits=splits)
    console = Console(width=120, record=True)
    console.print(_split_table(result, "verifier"))
    text = console.export_text()
    assert "llama-70b-fp8" in text and "all folds" in text
    assert "> 999% (53 sat.)" in text and "14.6%" in text and "155.0%" in text
    assert "< -99" in text and "-10.940" in text
    assert "6 coef." not in text and "cannot predict any of these points" in text
    assert max(len(line) for line in text.splitlines()) <= 120
    # where the point methods answer, their columns too, and still every column at 120
    answered = folds.assign(split="budget", point_answered=960, point_mape=0.045,
                            coef_answered=960, coef_mape=0.045, rps_star_pairs=31,
                            rps_star_within=0.94).iloc[[0]]
    console = Console(width=120, record=True)
    console.print(_split_table(SimpleNamespace(variant="hierarchical", folds=answered,
                                               splits=splits.assign(split="budget")),
                                   "budget"))
    text = console.export_text()
    assert "6 coef." in text and "fit s" in text and "0.94 of 31" in text
    assert max(len(line) for line in text.splitlines()) <= 120
