"""``python -m mmina`` is the ``mmina`` command."""

from mmina.cli import main

main()
