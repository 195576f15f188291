"""Shared test configuration."""

import os

import matplotlib

matplotlib.use("Agg")
os.environ.setdefault("PYTENSOR_FLAGS", "cxx=")
