"""bayeslat: Bayesian latency models for speculative decoding under load.

The stages, in the one direction data flows: :mod:`bayeslat.simulate` (or a GuideLLM sweep) →
:mod:`bayeslat.data` (the tidy table) → :mod:`bayeslat.models` and :mod:`bayeslat.fitting`
(the posterior) → :mod:`bayeslat.decide` and :mod:`bayeslat.report`. The closed-form formulas
live in :mod:`bayeslat.theory`. The Python API (:mod:`bayeslat.api`) is re-exported here::

    import bayeslat
    fit = bayeslat.fit(bayeslat.read_table("data/example/sweep.parquet"))
    fit.decide(alpha=0.75).verdicts()
"""

from bayeslat.version import __version__

__all__ = ["Decisions", "Fit", "__version__", "fit", "load", "read_table"]


def __getattr__(name: str):
    # The API is imported on first use, so that `import bayeslat` stays light (no PyMC).
    if name in __all__:
        from bayeslat import api

        return getattr(api, name)
    raise AttributeError(f"module 'bayeslat' has no attribute {name!r}")
