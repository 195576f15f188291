"""The Python walkthrough ``docs/api.md`` runs as written (a real NUTS fit: slow)."""

import doctest
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_api_walkthrough_runs(tmp_path, monkeypatch):
    # a user's folder: the project's data, and models/ and reports/ written there
    (tmp_path / "data").symlink_to(ROOT / "data")
    monkeypatch.chdir(tmp_path)
    result = doctest.testfile(str(ROOT / "docs" / "api.md"), module_relative=False,
                              optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0 and result.attempted >= 20, result
    assert (tmp_path / "models" / "example.nc").is_file()
    assert (tmp_path / "reports" / "example.html").is_file()
