"""A finished run leaves no process group alive at interpreter exit (gloo can abort the process then)."""

from __future__ import annotations

import socket

import torch.distributed as dist

from agon_lightning.cli.game import release_process_group


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_release_destroys_the_default_group_and_is_a_no_op_without_one():
    release_process_group()  # none up: nothing happens
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    assert dist.is_initialized()
    release_process_group()
    assert not dist.is_initialized()
    release_process_group()
