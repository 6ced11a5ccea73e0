"""Where a base model comes from, checked before anything loads: a directory, a shipped model, or the Hub.

``from_pretrained`` takes any name that is not an existing directory for a Hub id, so a
mistyped path ends in a Hub id validation error, and a Hub id that is not cached, on a
machine without network, is retried for about a minute before the load fails without
naming the model. :func:`check_model_source` runs when a command is parsed and fails at
once with the fix: a name that looks like a path must be a model directory (it is never
sent to the Hub); a Hub id must be in the local cache, or answer a single request.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from agon_lightning.game.names import SHIPPED as SHIPPED_PREFIX  # agon:NAME, shipped in the package
from agon_lightning.infra.errors import UsageError

HUB_TIMEOUT_S = 10.0


def resolve_model_path(name: str) -> str:
    """``agon:NAME`` → the model shipped in ``agon_lightning/assets/NAME``; else unchanged.

    Raises:
        FileNotFoundError: ``agon:NAME`` names no shipped model (the message lists those there are).
    """
    if not name.startswith(SHIPPED_PREFIX):
        return name
    asset = name[len(SHIPPED_PREFIX) :]
    path = Path(str(resources.files("agon_lightning") / "assets" / asset))
    if not (path / "config.json").is_file():
        available = sorted(p.name for p in path.parent.iterdir() if (p / "config.json").is_file())
        raise FileNotFoundError(
            f"no embedded model {name!r}; available: {[SHIPPED_PREFIX + a for a in available]}"
        )
    return str(path)


def looks_like_path(name: str) -> bool:
    """A name no Hub id can be: absolute, ``./``/``../``/``~``, a backslash, or more than one ``/``."""
    return name.startswith(("/", "./", "../", "~", ".\\")) or "\\" in name or name.count("/") > 1


def check_model_source(name: str, option: str) -> None:
    """Fail now, naming the fix, if ``name`` cannot be loaded as a base model.

    Args:
        name: A model directory, ``agon:NAME``, or a Hub id.
        option: The option that gave it (``--model.model_name_or_path``), for the message.

    Raises:
        UsageError: a path-looking name that is not a model directory; an unknown shipped
            model; a Hub id that is neither cached nor reachable (offline, no such model).
    """
    if name.startswith(SHIPPED_PREFIX):
        try:
            resolve_model_path(name)
        except FileNotFoundError as err:
            raise UsageError(f"{option}: {err}") from err
        return
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UsageError(f"{option}: {name} is a directory but not a model directory (no config.json)")
        return
    if looks_like_path(name) or path.exists():
        raise UsageError(f"{option}: no model directory {name}")
    _check_hub(name, option)


def _check_hub(name: str, option: str) -> None:
    """A Hub id: cached, or one request (no retries) says whether the Hub has it."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url, try_to_load_from_cache
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        HFValidationError,
        RepositoryNotFoundError,
    )

    local_copy = f"or point at a local copy: {option}=/path/to/{name.rsplit('/', 1)[-1]}"
    try:
        cached = try_to_load_from_cache(name, "config.json")
    except HFValidationError as err:
        raise UsageError(f"{option}: no model directory {name}, and {name!r} is not a Hub id") from err
    if isinstance(cached, str):
        return
    if constants.HF_HUB_OFFLINE:
        raise UsageError(
            f"{option}: {name!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set; "
            f"download it where there is network (hf download {name}) {local_copy}"
        )
    try:
        get_hf_file_metadata(hf_hub_url(name, "config.json"), timeout=HUB_TIMEOUT_S)
    except GatedRepoError as err:
        raise UsageError(
            f"{option}: {name!r} is gated on the Hub: accept its terms and log in, {local_copy}"
        ) from err
    except RepositoryNotFoundError as err:
        raise UsageError(f"{option}: no model directory {name}, and no model {name!r} on the Hub") from err
    except EntryNotFoundError as err:
        raise UsageError(f"{option}: the Hub repository {name!r} has no config.json (not a model)") from err
    except HfHubHTTPError as err:
        raise UsageError(f"{option}: the Hub did not serve {name!r} ({err}); {local_copy}") from err
    except Exception as err:  # no connection: DNS, refused, timeout (the HTTP client's own types)
        raise UsageError(
            f"{option}: cannot reach the Hugging Face Hub for {name!r} ({type(err).__name__}: {err}) "
            f"and it is not in the local cache; download it where there is network (hf download {name}) "
            f"{local_copy}; HF_HUB_OFFLINE=1 skips the attempt"
        ) from err
