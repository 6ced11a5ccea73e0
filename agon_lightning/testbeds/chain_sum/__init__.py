"""The chain_sum testbed: reasoning-gym's arithmetic (``chain_sum``, ``basic_arithmetic``).

The worked solutions the tiny base is warm-started on (:mod:`.traces`) and the SFT examples
built from them in both roles (:mod:`.sft`), the default examples of ``agon sft``. Its configs
are the repository's ``configs/agon.yaml`` and ``configs/sft_tiny.yaml``.
"""
