"""Testbeds: each domain the game is measured on, one folder each.

A folder holds everything of its domain: the task and its formats, the summarizer, the SFT data
generator and the preconditions a base must meet. Its configs are in the repository's
``configs/`` (shipped as ``agon:NAME.yaml``); the analyses of the experiments run on it read
committed runs and live with them (the checkout's ``experiments/``). A new domain starts as a
copy of ``countdown/``: nothing outside the folder needs to change, since configs name its
classes by path, and its summarizer and SFT examples register by entry point
(``agon_lightning.summarizers``, ``agon_lightning.examples``).

The floor above the CLI: a testbed may use every part of the package (its preconditions run
the CLI); nothing in the package imports a testbed, not even inside a function. Where a lower
floor needs a testbed's class as its default (``agon sft``'s examples: chain_sum's arithmetic),
it finds it through the entry point the testbed registers.
"""
