"""The installed version of bayeslat (a leaf module: every stage may import it)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("bayeslat")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"
