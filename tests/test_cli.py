"""The command line: help, version, the theory verb and the error boundary."""

import subprocess
import sys

from typer.testing import CliRunner

from bayeslat import __version__
from bayeslat.cli import app

runner = CliRunner()


def test_help_lists_every_verb():
    from bayeslat.cli.app import VERBS

    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for verb in VERBS:
        assert verb in result.output


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"bayeslat {__version__}"


def test_theory_prints_the_worked_example():
    result = runner.invoke(app, ["theory", "--rps", "0,8"])
    assert result.exit_code == 0, result.output
    assert "1.538" in result.output and "1.119" in result.output
    assert "RPS* = 8.86 req/s" in result.output


def test_bad_option_is_one_line_exit_2_no_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "bayeslat", "theory", "--rps", "one,two"],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "--rps" in proc.stderr and "numbers separated by commas" in proc.stderr


def test_negative_coefficient_rejected():
    result = runner.invoke(app, ["theory", "--c2-sd", "-1"])
    assert result.exit_code == 2
    assert "--c2-sd" in result.output


def test_bad_option_values_are_refused_before_pandas_or_the_models_are_imported(tmp_path):
    """What makes a refusal take seconds is importing the stack: pandas, xarray, PyMC. A bad
    --alpha, --rps, --model, --k or --prefill is refused, exit 2, with none of them imported."""
    script = f"""
import sys
from typer.testing import CliRunner
from bayeslat.cli import app
fit = {str(tmp_path / "fit.nc")!r}
for args in (["decide", fit, "--alpha", "1.5"], ["report", fit, "--rps", "-1"],
             ["theory", "--rps", "x"], ["fit", "--model", "foo"],
             ["ingest", fit, "-o", fit + ".parquet", "--k", "-1"],
             ["ingest", fit, "-o", fit + ".parquet", "--alpha", "2"],
             ["ingest", fit, "-o", fit + ".parquet", "--prefill", "0"]):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and args[-2] in result.output, (args, result.output)
heavy = [m for m in ("pandas", "xarray", "pymc", "bayeslat.fitting") if m in sys.modules]
print(heavy)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["[]"]
