"""Deployment: the trained pair as a bundle, and the two-stage cascade that runs it.

- :mod:`~agon_lightning.deploy.bundle`: writing and reading a bundle (adapters, components, ``agon.json``);
- :mod:`~agon_lightning.deploy.cascade`: ``Cascade``, draft then challenge, loaded from a bundle;
- :mod:`~agon_lightning.deploy.predict`: ``agon predict``, the cascade over a problem file;
- :mod:`~agon_lightning.deploy.export`: ``agon export``, merged weights or a multi-LoRA layout;
- ``serve*``: ``agon serve``, the cascade behind an OpenAI-compatible endpoint (``serve`` the
  app, ``serve_api`` the request schema, ``serve_engine`` the batched runner, ``serve_queue``
  the batching queue, ``serve_responses`` the replies, ``serve_stream`` streamed tokens).
"""
