"""``bayeslat report``: the page's pieces (fast), the shipped example's report in Chromium (slow).

The browser check runs Debian's ``chromium`` headless, with networking and first-run features off
and a fresh profile. The test injects a script into a copy of the report that, on the page's
``load`` event, tries the page's own script (a long table's filter box and sorting), records
every image's decoded size, every section, and every error
(uncaught exceptions, failed resources, ``console.error``) into a ``data-checks`` attribute of
``<body>``; ``--dump-dom`` prints the DOM after the load, and the test parses it. Chromium's own
log of console messages (``--enable-logging=stderr``) is checked as well. This needs no
DevTools client (no websocket library) and no network. A second run saves a screenshot under the
test's temporary folder, the CI artifact. Both the report built now (from the committed default
fit of the example when it is current, else from a short fit) and the committed
``reports/example.html`` are checked; the short fit does not converge, so it is reported with
``allow_unconverged``. The fast tests build a report of a tiny fit whose draws all sit at
its start point (no sampling).
"""

from __future__ import annotations

import base64
import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support.point_mass import point_mass

from bayeslat import report
from bayeslat.models import sampling
from bayeslat.report import answer, inputs, page
from bayeslat.report import data as data_section

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "data" / "example" / "sweep.parquet"
# The fit of the shipped example that `bayeslat fit` writes by default (reports/example.html).
DEFAULT_FIT = ROOT / "models" / "sweep-capacity.nc"  # make example's
COMMITTED_REPORT = ROOT / "reports" / "example.html"
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars")

CHECKS = """<script>
(function () {
  var errors = [];
  window.addEventListener('error', function (e) {
    errors.push('error: ' + (e.message || (e.target && (e.target.src || e.target.href))
                             || 'unknown'));
  }, true);
  var original = console.error;
  console.error = function () {
    errors.push('console.error: ' + Array.prototype.join.call(arguments, ' '));
    original.apply(console, arguments);
  };
  window.addEventListener('load', function () {
    var images = Array.prototype.map.call(document.images, function (img) {
      return [img.complete, img.naturalWidth, img.naturalHeight, img.alt]; });
    var sections = Array.prototype.map.call(document.querySelectorAll('section'), function (s) {
      var h = s.querySelector('h2'); return [s.id, h ? h.textContent : '']; });
    // the page's own script: a filter box per long table, sorting by a header's click
    var long = document.querySelectorAll('table.long'), tables = {count: long.length};
    tables.filters = document.querySelectorAll('input.filter').length;
    if (long.length) {
      var th = long[0].tHead.rows[0].cells[0], box = document.querySelector('input.filter');
      th.click();
      tables.sorted = th.getAttribute('data-sorted');
      box.value = 'no-row-contains-this';
      box.dispatchEvent(new Event('input'));
      tables.shownAfterFilter = Array.prototype.filter.call(long[0].tBodies[0].rows,
        function (r) { return r.style.display !== 'none'; }).length;
    }
    document.body.setAttribute('data-checks', JSON.stringify(
      {images: images, sections: sections, errors: errors, tables: tables}));
  });
})();
</script>"""


# -- fast: the pieces ----------------------------------------------------------------------------
def test_figure_is_an_embedded_png_with_its_caption():
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 1))
    ax.plot([0, 1], [0, 1])
    out = page.figure(fig, "a <caption>")
    data = re.search(r'src="data:image/png;base64,([^"]+)"', out).group(1)
    png = base64.b64decode(data)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert width > 50 and height > 20
    assert "a &lt;caption&gt;" in out and "<caption>" not in out


def test_a_laid_out_figure_is_drawn_once(monkeypatch):
    """tight_layout() leaves a placeholder layout engine that would make savefig draw the
    whole figure twice; page.figure draws it once."""
    from matplotlib import pyplot as plt
    from matplotlib.figure import Figure

    fig, ax = plt.subplots(figsize=(2, 1))
    ax.plot([0, 1], [0, 1])
    fig.tight_layout()
    draws = []
    original = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda self, renderer: (draws.append(1),
                                                                 original(self, renderer)))
    page.figure(fig, "once")
    assert len(draws) == 1


def test_figures_come_back_out_of_a_page_as_named_pngs(tmp_path):
    from matplotlib import pyplot as plt

    parts = []
    for alt in ("universal collapse", "speedup llama-8b H100 p256 eagle3:x"):
        fig, ax = plt.subplots(figsize=(2, 1))
        ax.plot([0, 1], [1, 0])
        parts.append(page.figure(fig, "caption", alt))
    path = tmp_path / "r.html"
    path.write_text(page.render("t", [], [page.Section("data", "Data").add(*parts)]))
    saved = report.save_figures(path, tmp_path / "figures")
    assert [p.name for p in saved] == ["universal-collapse.png",
                                       "speedup-llama-8b-h100-p256-eagle3-x.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in saved)
    with pytest.raises(Exception, match="--overwrite"):
        report.save_figures(path, tmp_path / "figures")


def test_render_has_every_section_and_fetches_nothing():
    sections = [page.Section(sid, f"Title {sid}").add(page.text("x < y")) for sid in
                report.SECTIONS]
    out = page.render("t", ["made by a test"], sections)
    for sid in report.SECTIONS:
        assert f'<section id="{sid}">' in out and f'href="#{sid}"' in out
    assert "x &lt; y" in out
    assert not re.search(r'(src|href)="(https?:)?//', out)
    assert out.count("<script") == 1 and f"<script>{page.SCRIPT}</script>" in out
    assert "<link" not in out


def test_table_formats_floats_and_escapes():
    out = page.table(pd.DataFrame({"name": ["<b>"], "value": [1.23456], "gap": [np.nan]}))
    assert "&lt;b&gt;" in out and "1.23" in out and "1.2345" not in out and "–" in out


def test_excluded_points_are_parsed_into_configuration_load_reason():
    lines = ["llama-8b H100 p256 g128 k0 rps=37.69 (throughput strategy (measures the ceiling))",
             "odd line"]
    df = data_section.excluded_table(lines)
    assert df.loc[0, "configuration"] == "llama-8b H100 p256 g128 k0"
    assert df.loc[0, "rps (req/s)"] == pytest.approx(37.69)
    assert df.loc[0, "reason"] == "throughput strategy (measures the ceiling)"
    assert df.loc[1, "configuration"] == "odd line" and np.isnan(df.loc[1, "rps (req/s)"])


def test_pick_keeps_lowest_middle_highest_snapped_to_the_grid():
    grid = np.round(np.linspace(0.4, 0.95, 12), 3)
    assert inputs.pick([0.6, 0.9, 0.75], grid) == [pytest.approx(0.6), pytest.approx(0.75, 0.03),
                                                  pytest.approx(0.9, 0.03)]
    assert len(inputs.pick([0.5, 0.6, 0.7, 0.8, 0.9], grid)) == inputs.MAX_ALPHAS


def test_curves_cover_every_configuration_past_its_highest_load():
    from bayeslat.data import schema

    table = schema.read_table(EXAMPLE)
    table = table[~table["saturated"]]
    grid = inputs.curve_rows(table)
    labels = schema.config_labels(grid)
    assert set(labels) == set(schema.config_labels(table))
    assert (labels.value_counts() == inputs.GRID_POINTS).all()
    top = grid.groupby(labels)["rps"].max()
    measured = table.groupby(schema.config_labels(table))["rps"].max()
    assert (top.loc[measured.index] > measured).all()
    assert (grid.groupby(labels)["rps"].min() == 0).all()


def test_thinning_keeps_the_same_random_draws_in_every_chain(tiny_fit):
    from bayeslat import fitting

    whole = fitting.load(tiny_fit["fit"])  # 2 chains x 20 draws
    thin = whole.thinned(10, np.random.default_rng(1))
    post = thin.posterior
    assert dict(post.sizes)["chain"] == 2 and dict(post.sizes)["draw"] == 5
    kept = post["draw"].values
    assert len(set(kept)) == 5 and not np.array_equal(kept, np.arange(5))
    np.testing.assert_array_equal(post["sigma"].values,
                                  whole.posterior["sigma"].sel(draw=kept).values)
    assert thin.idata.groups() == ["posterior"] and "sample_stats" in whole.idata.groups()
    assert whole.thinned(400, np.random.default_rng(1)) is whole  # nothing to thin


def test_least_converged_parameters_are_arviz_figures_for_each_value():
    import arviz as az

    from bayeslat.report import diagnostics

    rng = np.random.default_rng(3)
    walk = np.cumsum(rng.standard_normal((2, 200, 4)), axis=1)  # badly mixed
    idata = az.from_dict(posterior={"mu": rng.standard_normal((2, 200)),
                                    "theta": rng.standard_normal((2, 200, 3)) + walk[..., :3] *
                                    np.array([0.0, 0.05, 0.5]),
                                    "tau": walk[..., 3]},
                         coords={"group": ["g a", "g b", "g c"]}, dims={"theta": ["group"]})
    table = diagnostics.worst(idata.posterior)
    assert list(table.columns) == ["parameter", "r_hat", "ess_bulk", "ess_tail"]
    assert set(table["parameter"][:2]) == {"tau", "theta[g c]"}  # the walks first
    assert set(table["parameter"]) == {"mu", "tau", "theta[g a]", "theta[g b]", "theta[g c]"}
    assert (np.diff(table["r_hat"]) <= 0).all()
    reference = az.summary(idata, kind="diagnostics", round_to="none")
    for row in table.itertuples():
        want = reference.loc[row.parameter]
        assert row.r_hat == pytest.approx(want["r_hat"], rel=1e-9)
        assert row.ess_bulk == pytest.approx(want["ess_bulk"], rel=1e-9)
        assert row.ess_tail == pytest.approx(want["ess_tail"], rel=1e-9)


def test_report_refuses_to_overwrite_before_doing_any_work(tmp_path):
    out = tmp_path / "r.html"
    out.write_text("keep me")
    from bayeslat.errors import InputError

    with pytest.raises(InputError, match="--overwrite"):
        report.write([tmp_path / "missing.nc"], out)
    assert out.read_text() == "keep me"


def test_report_of_a_missing_model_is_one_error_line(tmp_path):
    from typer.testing import CliRunner

    from bayeslat.cli import app

    result = CliRunner().invoke(app, ["report", str(tmp_path / "nope.nc"), "-o",
                                      str(tmp_path / "r.html")])
    assert result.exit_code == 2
    assert "nope.nc" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "r.html").exists()


# -- adequacy, unconverged fits, load marks (a tiny fit at its start point: seconds) --------------


@pytest.fixture(scope="module")
def tiny_fit(tmp_path_factory):
    """A fit of one group (baseline, k = 2, 4) whose k = 4 curve rises 60% above the model at
    its top three loads, with throughput benchmarks 30% above the highest constant rate."""
    import pymc as pm

    from bayeslat import api
    from bayeslat.data import schema
    from bayeslat.simulate.generative import SamplerSpec, sample_sweep

    spec = SamplerSpec(prefill_tokens=(128.0,), decode_tokens=(64.0,), alphas=(0.8,), ks=(2, 4),
                       n_rates=6)
    table, _ = sample_sweep(spec, seed=4)
    labels = schema.config_labels(table)
    rank = table.groupby(labels)["rps"].rank(ascending=False)
    factor = np.where((rank <= 3) & (table["k"] == 4), 1.6, 1.0)
    table = table.assign(latency_mean=table["latency_mean"] * factor,
                         latency_std=table["latency_std"] * factor)
    top = table.loc[table.groupby(labels)["rps"].idxmax()]
    ceilings = top.assign(strategy="throughput", rate_target=np.nan, rps=top["rps"] * 1.3,
                          saturated=True,
                          saturation_reason="throughput strategy (measures the ceiling)",
                          source=[f"throughput#{i}" for i in range(len(top))])
    folder = tmp_path_factory.mktemp("tiny")
    schema.write_table(pd.concat([table, ceilings], ignore_index=True), folder / "t.parquet")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pm, "sample", point_mass)
        api.fit(folder / "t.parquet", "hierarchical", draws=20, chains=2, sampler="pymc",
                progressbar=False).save(folder / "fit.nc")
    return {"fit": folder / "fit.nc", "ceiling": float(ceilings.loc[ceilings["k"] == 0,
                                                                     "rps"].iloc[0]),
            "highest": float(table["rps"].max())}


def test_report_refuses_an_unconverged_fit_unless_allowed(tiny_fit, tmp_path):
    from typer.testing import CliRunner

    from bayeslat.cli import app

    out = tmp_path / "r.html"
    refused = CliRunner().invoke(app, ["report", str(tiny_fit["fit"]), "-o", str(out)])
    assert refused.exit_code == 2
    assert "did not converge" in refused.output and "--allow-unconverged" in refused.output
    assert not out.exists()
    allowed = CliRunner().invoke(app, ["report", str(tiny_fit["fit"]), "-o", str(out),
                                       "--allow-unconverged"])
    assert allowed.exit_code == 0, allowed.output
    assert "did not converge" in allowed.output
    text = out.read_text(encoding="utf-8")
    head = text[:text.index("<section")]
    assert '<p class="alert">The fit fit.nc did not converge' in head
    assert "adequacy warning" in head  # the k = 4 curve misfits
    ids = re.findall(r'<section id="([^"]+)">', text)
    assert ids == list(report.SECTIONS) and ids[:2] == ["answer", "adequacy"]
    answer_html = text[text.index('<section id="answer">'):text.index('<section id="adequacy">')]
    assert "lowest, middle and highest measured load" in answer_html
    assert len(re.findall(r"<td>(SD on, k = \d|SD off|saturated)</td>", answer_html)) == 3
    # the k = 4 curve misses its top three loads: the answer says the fit there is poor
    assert re.search(r"<td>POOR: \d+% of top-load points inside 90%", answer_html)
    adequacy_html = text[text.index('<section id="adequacy">'):text.index('<section id="data">')]
    assert "points inside the 90% interval" in adequacy_html and "Warning:" in adequacy_html
    assert "k4" in adequacy_html and "NO" in adequacy_html


def test_report_opens_with_the_answer_at_the_loads_asked_for(tiny_fit, tmp_path):
    """--rps and --alpha set where the answer is given: one row per load and rate, on or off
    as the decision Dataset says there; bad values are refused before any work."""
    from typer.testing import CliRunner

    from bayeslat import decide, fitting
    from bayeslat.cli import app

    out = tmp_path / "r.html"
    for bad in (["--alpha", "1.5"], ["--rps", "-1"], ["--rps", "x"]):
        refused = CliRunner().invoke(app, ["report", str(tiny_fit["fit"]), "-o", str(out),
                                           "--allow-unconverged", *bad])
        assert refused.exit_code == 2 and bad[0] in refused.output and not out.exists()
    data = inputs.Inputs({"fit.nc": fitting.load(tiny_fit["fit"])})
    data.predict_decisions()
    data.predict_answers(rps=[0.5, 2.0, 3 * tiny_fit["ceiling"]], alpha=[0.7, 0.8])
    answers = data.answers
    assert data.asked and len(answers) == 6
    assert sorted(set(answers["alpha"])) == [0.7, 0.8]
    (setup, ds), = data.decisions.items()
    loads = np.array([0.5, 2.0, 3 * tiny_fit["ceiling"]])
    same = decide.each_setup(data.thin, decide.setups(data.model.table), [0.7, 0.8],
                             ds["k"].values, {setup: loads})[0]
    np.testing.assert_array_equal(answers["k"], same["k_risk"].isel(setup=0).transpose(
        "alpha", "rps").values.ravel())
    far = answers[answers["rps"] == 3 * tiny_fit["ceiling"]]
    assert far["extrapolated"].all() and (far["answer"] == "saturated").all()
    table = answer.answer_table(answers)
    assert table["setup"].tolist() == [setup] + [""] * 5
    # alpha 0.8 was measured, up to below the third load; 0.7 was not: SD there is a
    # prediction at every load
    sd = answers["k"].fillna(0).to_numpy() > 0
    assert table["load (req/s)"].str.endswith("(extrapolated)").tolist() == [
        bool(on) or far for on, far in zip(sd[:3], (False, False, True), strict=True)] + [
        False, False, True]


def test_every_figure_has_a_legend(tiny_fit, monkeypatch):
    figure, seen = page.figure, {}

    def record(fig, caption, alt=None):
        seen[alt or caption] = bool(fig.legends) or any(ax.get_legend() is not None
                                                         for ax in fig.axes)
        return figure(fig, caption, alt)

    monkeypatch.setattr(page, "figure", record)
    report.build([tiny_fit["fit"]], allow_unconverged=True, jobs=1)
    assert len(seen) >= 10 and [alt for alt, has in seen.items() if not has] == []


def test_sections_drawn_in_processes_are_the_ones_drawn_here(tiny_fit):
    """The forked drawing processes give the page byte for byte."""
    one = report.build([tiny_fit["fit"]], allow_unconverged=True, jobs=1)
    assert report.build([tiny_fit["fit"]], allow_unconverged=True, jobs=3) == one


def test_latency_figure_shows_no_sd_and_the_chosen_k_in_its_colour_with_the_ceiling(tiny_fit):
    """One panel per setup: k = 0 and the k the answer picks most often, each in the colour of
    its k (the speedup figure's), the measured points, a legend, the measured ceiling (on the
    speedup figure too)."""
    from matplotlib import colors

    from bayeslat import fitting
    from bayeslat.report import latency, speedup

    data = inputs.Inputs({"fit.nc": fitting.load(tiny_fit["fit"])})
    data.predict_decisions()
    (setup, ds), = data.decisions.items()
    alpha = data.shown_alphas[setup][0]
    k = latency.chosen_k(ds, alpha)
    picked = ds["k_risk"].sel(alpha=alpha).where(~ds["extrapolated"]).values
    assert k in {2, 4} and (k == picked).any()
    fig = latency.latency_figure(data)
    ax, = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert colors.same_color(lines[f"SD, k = {k}"].get_color(), page.K_COLORS[k])
    assert colors.same_color(lines["no SD (k = 0)"].get_color(), page.K_COLORS[0])
    assert ax.get_legend() is not None
    assert any(t.get_text().startswith(page.CEILING) for t in ax.texts)
    spd = speedup.setup_figure(setup, ds, [alpha], data.load_limits[setup])
    assert any(t.get_text().startswith(page.CEILING) for t in spd.axes[0].texts)
    drawn = {line.get_label(): line.get_color() for line in spd.axes[0].get_lines()}
    assert colors.same_color(next(c for label, c in drawn.items()
                                  if label.startswith(f"k={k} ")), page.K_COLORS[k])


def test_speedup_section_explains_the_steps_of_evenly_spaced_requests(tiny_fit):
    """A fit of constant-rate benchmarks (the tiny fit's) draws its curves on the staircase
    of evenly spaced requests, and the speedup section says why they climb in steps; a fit of
    Poisson benchmarks has no steps and no such paragraph."""
    from bayeslat import decide, fitting
    from bayeslat.report import speedup

    data = inputs.Inputs({"fit.nc": fitting.load(tiny_fit["fit"])})
    assert decide.on_staircase(data.model)
    assert "climb in steps" in speedup.section(data).html()
    table = data.model.table
    data.model.table = table.assign(strategy=table["strategy"].replace("constant", "poisson"))
    assert not decide.on_staircase(data.model)
    assert "climb in steps" not in speedup.section(data).html()


def test_decision_grids_end_at_the_measured_ceiling(tiny_fit):
    from bayeslat import fitting

    data = inputs.Inputs({"fit.nc": fitting.load(tiny_fit["fit"])})
    data.predict_latency()
    data.predict_decisions()
    (setup, ds), = data.decisions.items()
    highest, ceiling = data.load_limits[setup]
    assert ceiling == pytest.approx(tiny_fit["ceiling"], rel=1e-3)
    assert highest == pytest.approx(tiny_fit["highest"])
    assert float(ds["rps"].max()) == pytest.approx(ceiling * inputs.CEILING_REACH)


def test_load_marks_shade_extrapolation_and_draw_the_ceiling():
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots()
    ax.set_xlim(0, 50)
    page.mark_loads(ax, measured=40.0, ceiling=47.0)
    texts = [t.get_text() for t in ax.texts]
    assert page.EXTRAPOLATION in texts and f"{page.CEILING} 47" in texts
    spans = [p for p in ax.patches if p.get_x() == pytest.approx(40.0)]
    assert spans and spans[0].get_width() == pytest.approx(10.0)
    assert [line.get_xdata()[0] for line in ax.lines] == [40.0, 47.0]  # boundary, ceiling
    plt.close(fig)
    fig, ax = plt.subplots()
    ax.set_xlim(0, 50)
    page.mark_loads(ax, measured=40.0, ceiling=None)
    assert f"{page.HIGHEST} 40" in [t.get_text() for t in ax.texts]
    plt.close(fig)


def test_misfit_configurations_are_framed_with_their_coverage():
    import xarray as xr

    from bayeslat.data import schema
    from bayeslat.report import collapse
    from bayeslat.simulate.generative import SamplerSpec, sample_sweep

    table, _ = sample_sweep(SamplerSpec(prefill_tokens=(128.0,), decode_tokens=(64.0,),
                                        alphas=(0.8,), ks=(2,), n_rates=4), seed=0)
    grid = inputs.curve_rows(table)

    def draws(rows):
        lat = np.broadcast_to(rows["latency_mean"].to_numpy() if "latency_mean" in rows
                              else np.ones(len(rows)), (1, 5, len(rows)))
        return xr.Dataset({"latency": (("chain", "draw", "obs"), lat),
                           "latency_pp": (("chain", "draw", "obs"), lat)})

    labels = schema.config_labels(table).unique()
    configs = pd.DataFrame({"config": labels, "misfit": [False, True],
                            "inside_90": [1.0, 0.5]})
    group = schema.group_labels(table).iloc[0]
    fig = collapse.configs_figure(table, draws(table), grid, draws(grid), list(labels), configs)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[0] == f"{group}\nk0" and titles[1].endswith("MISFIT: 50% inside 90%")
    assert fig.axes[1].spines["left"].get_linewidth() == 2.5
    assert fig.axes[0].spines["left"].get_linewidth() < 2.5


# -- slow: the shipped example in a browser ------------------------------------------------------
def _example_fit(tmp_path_factory) -> Path:
    """The default fit of the shipped example if it is there and current, else a short fit."""
    from bayeslat import fitting
    from bayeslat.data import schema
    from bayeslat.models import choose, get
    from bayeslat.models.base import table_hash

    table = schema.read_table(EXAMPLE)
    if DEFAULT_FIT.exists() and fitting.load(DEFAULT_FIT).data_hash == table_hash(table):
        return DEFAULT_FIT
    # A short real fit (a few minutes on 2 cores): enough draws for every figure and table.
    model = get(choose(table)[0])(table)
    sampling.sample(model, draws=100, tune=200, chains=2, progressbar=False)
    return model.save(tmp_path_factory.mktemp("fit") / "example.nc")


@pytest.fixture(scope="session")
def example_report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "example.html"
    # the short fit does not converge: the report must still open (and says so at its top)
    return report.write([_example_fit(tmp_path_factory)], out, allow_unconverged=True)


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.fail("Debian's chromium is needed for this test: apt-get install -y chromium")
    return found


def _run_chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    return subprocess.run([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=180, check=False)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["built", "committed"])
def test_example_report_opens_in_chromium(which, request, tmp_path):
    """The report built now from the example's fit, and the one committed for the README."""
    example_report = (request.getfixturevalue("example_report") if which == "built"
                      else COMMITTED_REPORT)
    text = example_report.read_text(encoding="utf-8")
    assert not re.search(r'(src|href)="(https?:)?//', text), "the report fetches something"
    assert len(text.encode("utf-8")) <= 3 * 2**20, "the page must stay under 3 MB"
    checked = tmp_path / "checked.html"
    checked.write_text(text.replace("<head>", "<head>\n" + CHECKS, 1), encoding="utf-8")
    proc = _run_chromium(tmp_path, "--enable-logging=stderr", "--v=0",
                         "--virtual-time-budget=20000", "--dump-dom", checked.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = re.search(r'data-checks="([^"]*)"', proc.stdout)
    assert found, "the page's load event never ran"
    checks = json.loads(html.unescape(found.group(1)))

    sections = [sid for sid, _ in checks["sections"]]
    assert all(title.strip() for _, title in checks["sections"])
    # At least one figure in every section but the answer, the data table and the limits.
    assert len(checks["images"]) >= len(report.SECTIONS) - 3
    for complete, width, height, alt in checks["images"]:
        assert complete and width > 0 and height > 0, f"image {alt!r} did not decode"
    assert checks["errors"] == []
    tables = checks["tables"]
    assert tables["count"] >= 3 and tables["filters"] == tables["count"]
    assert tables["sorted"].strip() == "\u25b2" and tables["shownAfterFilter"] == 0
    assert [line for line in proc.stderr.splitlines() if ":CONSOLE" in line] == []

    shot = tmp_path / f"example-report-{which}.png"
    proc = _run_chromium(tmp_path, "--window-size=1280,6000", f"--screenshot={shot}",
                         example_report.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sections == list(report.SECTIONS), "rebuild reports/example.html (README)"
    assert sections[0] == "answer"  # the answer before the evidence
