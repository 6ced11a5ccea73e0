"""The shipped YAML configs, installed as ``agon_lightning.configs`` (package data).

``agon config`` lists them, ``agon config NAME`` prints one, and every command that takes
``--config`` accepts ``agon:NAME`` for them, so a plain ``pip install`` needs no checkout.
"""
