"""The tidy sweep table contract."""

import numpy as np
import pandas as pd
import pytest

from bayeslat.data import schema
from bayeslat.errors import SchemaError


def make_rows(n=3, k=2):
    rows = []
    for i in range(n):
        rows.append(dict(
            verifier="llama-8b", verifier_params_b=8.0, drafter="eagle3-8b" if k else "none",
            drafter_params_b=0.25 if k else 0.0, method="eagle3" if k else "none",
            hardware="H100", moe_experts_active=0, moe_experts_total=0, prefill_tokens=512.0,
            decode_tokens=256.0, k=k, alpha=0.7 if k else np.nan,
            alpha_source="forced" if k else "none", strategy="constant", rate_target=1.0 + i,
            rps=0.98 + i, latency_mean=2.0 + 0.1 * i, latency_std=0.3, latency_p50=1.9,
            latency_p95=2.5, latency_p99=2.9, ttft_mean=0.05, itl_mean=0.007,
            n_successful=100, n_errored=0, n_incomplete=1, duration_s=60.0, saturated=False,
            saturation_reason="", source=f"run.json#{i}",
        ))
    return pd.DataFrame(rows)


def test_round_trip_is_lossless(tmp_path):
    df = pd.concat([make_rows(k=0), make_rows(k=3).assign(source=lambda d: d.source + "b")])
    path = schema.write_table(df, tmp_path / "t.parquet")
    back = schema.read_table(path)
    pd.testing.assert_frame_equal(back, schema.validate(df))
    assert list(back.columns) == list(schema.COLUMN_NAMES)


def test_labels():
    df = make_rows(k=3)
    assert schema.config_labels(df).iloc[0] == "llama-8b H100 p512 g256 eagle3:eagle3-8b a0.7 k3"
    assert schema.config_labels(make_rows(k=0)).iloc[0] == "llama-8b H100 p512 g256 k0"
    assert schema.group_labels(make_rows(k=0)).iloc[0] == "llama-8b H100 p512 g256"


@pytest.mark.parametrize(
    "column, value, needle",
    [
        ("latency_mean", np.nan, "finite"),
        ("latency_mean", -1.0, "positive"),
        ("rps", -0.5, "negative"),
        ("alpha", 1.5, "[0, 1]"),
        ("k", 1.5, "whole number"),
        ("strategy", "warp", "one of"),
        ("n_successful", 0, "at least one"),
    ],
)
def test_bad_values_name_the_column(column, value, needle):
    df = make_rows().astype({column: object})
    df.loc[1, column] = value
    with pytest.raises(SchemaError) as info:
        schema.validate(df, "x.parquet")
    msg = str(info.value)
    assert msg.startswith("x.parquet: field '" + column + "'")
    assert needle in msg and "run.json#1" in msg


def test_missing_column_and_duplicates():
    with pytest.raises(SchemaError, match="missing column"):
        schema.validate(make_rows().drop(columns="rps"))
    dup = pd.concat([make_rows(), make_rows()])
    with pytest.raises(SchemaError, match="duplicate benchmark"):
        schema.validate(dup)


def test_failed_write_leaves_existing_file(tmp_path):
    path = tmp_path / "t.parquet"
    path.write_bytes(b"precious")
    bad = make_rows()
    bad.loc[0, "latency_mean"] = -1
    with pytest.raises(SchemaError):
        schema.write_table(bad, path)
    assert path.read_bytes() == b"precious"
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]


def test_unreadable_file(tmp_path):
    path = tmp_path / "t.parquet"
    path.write_text("not parquet")
    with pytest.raises(SchemaError, match="not a readable Parquet"):
        schema.read_table(path)


def test_written_file_has_ordinary_permissions(tmp_path):
    import os

    umask = os.umask(0o022)
    try:
        path = schema.write_table(make_rows(), tmp_path / "t.parquet")
    finally:
        os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o644
