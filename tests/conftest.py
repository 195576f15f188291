"""Shared test configuration."""

import matplotlib

matplotlib.use("Agg")
