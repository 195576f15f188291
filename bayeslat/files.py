"""Writing output files so that a failure never leaves one half-written or clobbers a good one."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bayeslat.errors import InputError


def check_output(path: str | os.PathLike, overwrite: bool = True) -> Path:
    """``path`` as a :class:`~pathlib.Path` if a file may be written there: not a folder, and
    not an existing file unless ``overwrite``; else :class:`~bayeslat.errors.InputError`."""
    path = Path(path)
    if path.is_dir():
        raise InputError("this is a folder; give a file name", path)
    if path.exists() and not overwrite:
        raise InputError("the file exists; allow replacing it (--overwrite; overwrite=True in "
                         "Python) or choose another name", path)
    return path


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, overwrite: bool = True) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; move it onto ``path`` only if the block succeeds.

    The temporary file lives in the same folder so that the final :func:`os.replace` is atomic.
    On any exception the temporary file is removed and ``path`` is left exactly as it was.

    Parameters
    ----------
    path
        The file to write. Its folder is created if missing.
    overwrite
        If False and ``path`` exists, raise :class:`~bayeslat.errors.InputError` before writing.
    """
    path = check_output(path, overwrite)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp makes the file private (0600); give it the permissions a plain open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_path, 0o666 & ~umask)
        os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)
