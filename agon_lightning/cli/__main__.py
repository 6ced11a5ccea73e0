"""``python -m agon_lightning.cli ...`` is ``agon ...``."""

from agon_lightning.cli import main

main()
