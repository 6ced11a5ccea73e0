"""Testbeds: each domain the game is measured on, one folder each.

A folder holds everything of its domain: the task and its formats, the summarizer, the SFT data
generator and the analyses that measure it (preconditions, sizing, endpoints). Its configs are in
the repository's ``configs/`` (shipped as ``agon:NAME.yaml``). A new domain starts as a copy of
``countdown/``: nothing outside the folder needs to change, since configs name its classes by
path and its summarizer registers by entry point.

The floor above the CLI: a testbed may use every part of the package (its analyses run the
CLI); nothing in the package imports a testbed, except lazily, where a testbed's class is the
default: a data module that lists a task's whole space (``data.reasoning_gym.SPACES``, a module
that imports nothing itself) and the SFT data's default examples (``chain_sum.sft``).
"""
