"""Data with a known truth: simulated sweep tables.

Two generators write the tidy sweep table of :mod:`bayeslat.data.schema`:

- the *engine simulator* (:mod:`~bayeslat.simulate.engine`, driven by
  :mod:`~bayeslat.simulate.protocol` over the deployments of :mod:`~bayeslat.simulate.presets`):
  a discrete-event simulation of a continuous-batching server with speculative decoding, costed by
  a roofline on a named GPU (:mod:`~bayeslat.simulate.hardware`); it knows nothing of the fitted
  formula, so it can test it;
- the *model sampler* (:mod:`~bayeslat.simulate.generative`): draws tables from the Bayesian
  generative model itself, for recovery tests and calibration.

Submodules are imported where used; importing this package loads nothing heavy.
"""
