"""The scaling design and priors as configuration."""

import json

import numpy as np
import pandas as pd
import pytest

from bayeslat import scaling, theory
from bayeslat.errors import InputError
from bayeslat.scaling import ScalingConfig


def test_defaults_follow_design_and_round_trip_through_json():
    cfg = ScalingConfig()
    assert cfg.features("c2v") == ("intercept", "verifier_params_b", "kv_tokens")
    assert cfg.features("c1d") == ("intercept", "drafter_params_b")
    back = ScalingConfig.from_json(cfg.to_json())
    assert back.to_dict() == cfg.to_dict()


def test_toml_overrides_only_what_it_names(tmp_path):
    path = tmp_path / "model.toml"
    path.write_text('noncentered = ["c1p"]\n[design]\nc1p = ["verifier_params_b", '
                    '"prefill_tokens"]\n[priors]\ntau_mean = 0.3\n[priors.beta_scale]\n'
                    'c1p = 2.0\n')
    cfg = ScalingConfig.load(path)
    assert cfg.features("c1p") == ("intercept", "verifier_params_b", "prefill_tokens")
    assert cfg.features("c2p") == ScalingConfig().features("c2p")
    assert cfg.prior("tau_mean") == 0.3
    assert cfg.prior("beta_scale")["c1p"] == 2.0 and cfg.prior("beta_scale")["c2v"] == 0.005
    assert cfg.noncentered == ("c1p",)


def test_a_config_file_overrides_the_variants_own_defaults(tmp_path):
    """A file that sets only priors keeps each variant's parameterisation: capacity's
    non-centred c3v, c3p and c3d (without them its fit funnels) are not reset to the base
    default."""
    from bayeslat.models import config_of

    path = tmp_path / "model.toml"
    path.write_text("[priors]\ntau_mean = 0.3\n")
    capacity, hierarchical = config_of("capacity", path), config_of("hierarchical", path)
    assert capacity.noncentered == ("c1p", "c3v", "c3p", "c3d")
    assert hierarchical.noncentered == ("c1p",)
    assert capacity.prior("tau_mean") == hierarchical.prior("tau_mean") == 0.3
    path.write_text('noncentered = ["c1p"]\n')
    assert config_of("capacity", path).noncentered == ("c1p",)
    given = ScalingConfig()
    assert config_of("capacity", given) is given and config_of("capacity") is None


@pytest.mark.parametrize("text, field", [
    ('{"design": {"c1p": ["gpu_count"]}}', "design.c1p"),
    ('{"design": {"c1d": ["prefill_excess"]}}', "design.c1d"),  # a knee per server, not drafter
    ('{"priors": {"tau": 1}}', "priors"),
    ('{"colour": 1}', "colour"),
])
def test_bad_config_names_file_and_field(tmp_path, text, field):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        ScalingConfig.load(path)
    assert str(path) in str(err.value) and field in str(err.value)


def test_standardise_scales_by_mean_and_drops_constant_features():
    units = pd.DataFrame({"verifier_params_b": [8.0, 8.0], "prefill_tokens": [100.0, 300.0],
                          "decode_tokens": [50.0, 50.0]})
    x, scales = scaling.standardise(units, ("intercept", "verifier_params_b", "prefill_tokens"))
    assert list(scales) == ["intercept", "prefill_tokens"]  # one verifier size: not identifiable
    np.testing.assert_allclose(x, [[1.0, 0.5], [1.0, 1.5]])
    again, _ = scaling.standardise(units.iloc[:1], ("intercept", "verifier_params_b",
                                                    "prefill_tokens"), scales)
    np.testing.assert_allclose(again, x[:1])


def test_moe_split_parts_add_up_to_the_effective_coefficients():
    coefs = (0.05, 0.012, 0.002, 0.01, 6e-4, 3e-4)
    c1u, c1s, c2u, c2s = scaling.moe_split(*coefs, 0.7, 4, 128.0, 0.6, 0.3)
    c1, c2 = theory.effective_coefficients(*coefs, 0.7, 4, 128.0)
    assert c1u + c1s == pytest.approx(c1) and c2u + c2s == pytest.approx(c2)
    cycles = 128.0 / theory.tokens_per_cycle(0.7, 4)
    assert c1s == pytest.approx(cycles * 0.6 * 0.012)


def test_config_json_is_plain_json():
    assert json.loads(ScalingConfig().to_json())["noncentered"] == ["c1p"]
