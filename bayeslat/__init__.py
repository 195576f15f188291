"""bayeslat: Bayesian latency models for speculative decoding under load.

The stages, in the one direction data flows: :mod:`bayeslat.simulate` (or a GuideLLM sweep) →
:mod:`bayeslat.data` (the tidy table) → fit → posterior → decide and report. The closed-form
formulas live in :mod:`bayeslat.theory`.
"""

from bayeslat.version import __version__

__all__ = ["__version__", "load"]


def __getattr__(name: str):
    # bayeslat.load is imported on first use, so that `import bayeslat` stays light (no PyMC).
    if name == "load":
        from bayeslat.fit import load

        return load
    raise AttributeError(f"module 'bayeslat' has no attribute {name!r}")
