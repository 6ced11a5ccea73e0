"""Deployment: the trained adapters as a bundle, and the deployed policy that runs it.

- :mod:`~agon_lightning.deploy.bundle`: writing and reading a bundle (every adapter, components, the game,
  ``agon.json``);
- :mod:`~agon_lightning.deploy.cascade`: ``Cascade``, loaded from a bundle: draft then challenge, one
  adapter alone, or the game's answer graph, as the run deployed;
- :mod:`~agon_lightning.deploy.predict`: ``agon predict``, the deployed policy over a problem file;
- :mod:`~agon_lightning.deploy.export`: ``agon export``, merged weights or a multi-LoRA layout;
- ``serve*``: ``agon serve``, the deployed policy behind an OpenAI-compatible endpoint (``serve`` the
  app, ``serve_api`` the request schema, ``serve_engine`` the batched runner, ``serve_queue``
  the batching queue, ``serve_responses`` the replies, ``serve_stream`` streamed tokens).
"""
