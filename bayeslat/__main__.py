"""``python -m bayeslat``: the same as the ``bayeslat`` command."""

from bayeslat.cli import main

main()
