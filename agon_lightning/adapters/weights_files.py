"""An adapter's weights file on disk: which one a PEFT adapter directory holds, and whether it reads.

A truncated or garbled ``adapter_model.safetensors`` makes PEFT fail deep in its loader with a bare
``SafetensorError`` that names no file. Every path that reads adapters from disk (a bundle loaded to
deploy, ``lora.init_from`` to train from) checks the file's header here first, so the error names it.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from safetensors import SafetensorError, safe_open

ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")  # PEFT's names, preferred first


def weights_file(adapter_dir: Path) -> Path | None:
    """The weights file of a PEFT adapter directory, ``None`` when it holds none."""
    return next((adapter_dir / f for f in ADAPTER_WEIGHTS if (adapter_dir / f).is_file()), None)


def weights_problem(weights: Path) -> str | None:
    """Why an adapter's weights file cannot be read (its header or archive), else ``None``."""
    try:
        if weights.suffix == ".safetensors":
            with safe_open(str(weights), framework="pt") as f:
                f.keys()
        else:  # torch's zip archive
            zipfile.ZipFile(weights).close()
    except (SafetensorError, zipfile.BadZipFile, OSError) as err:
        return str(err)
    return None
