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
