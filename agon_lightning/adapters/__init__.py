"""The two policies: LoRA adapters on one frozen base, and everything that runs them.

- :mod:`~agon_lightning.adapters.policy`: loading the base, attaching ``alpha`` and ``beta``,
  switching between them, the policies' forward for log-probs;
- :mod:`~agon_lightning.adapters.fast_lora`: the fused LoRA forward, and the merged weights
  sampling uses;
- :mod:`~agon_lightning.adapters.shared_prompt`: the prompt prefix a group of rows shares, run
  once (for training log-probs and for sampling).
"""
