"""bayeslat: Bayesian latency models for speculative decoding under load.

The stages, in the one direction data flows: :mod:`bayeslat.simulate` (or a GuideLLM sweep) →
:mod:`bayeslat.data` (the tidy table) → fit → posterior → decide and report. The closed-form
formulas live in :mod:`bayeslat.theory`.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("bayeslat")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"


def __getattr__(name: str):
    # bayeslat.load is imported on first use, so that `import bayeslat` stays light (no PyMC).
    if name == "load":
        from bayeslat.fit import load

        return load
    raise AttributeError(f"module 'bayeslat' has no attribute {name!r}")
