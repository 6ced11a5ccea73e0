"""Which code a run executes (the commit of the checkout ``agon_lightning`` is imported from), and on what.

A sweep's runs are separate processes, each importing the package as it is on disk when it
starts: a commit made while a sweep runs reaches every run started after it, and a run resumed
in a later session goes on with whatever the checkout holds then. :func:`code_version` names that
code so that a run's records can say which it was; :func:`environment` names the processor and
the library versions it ran on, which a resumed run may also not share with its first sitting.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import agon_lightning

PACKAGE = Path(agon_lightning.__file__).resolve().parent


def code_version(package: Path = PACKAGE) -> str | None:
    """``"<commit>"``, or ``"<commit>+changes"`` where the code's tracked files differ from it; ``None`` outside a git checkout.

    ``None`` too where the package is not a tracked part of the enclosing repository (an install
    under a virtual environment that happens to sit inside some other checkout).
    """
    git = ["git", "-C", str(package)]
    try:
        tracked = subprocess.run(
            [*git, "ls-files", "--error-unmatch", "__init__.py"], capture_output=True, timeout=30
        )
        if tracked.returncode != 0:
            return None
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
        if head.returncode != 0:
            return None
        # the code a run imports: the package and, in a source checkout, the callbacks and configs beside it
        paths = [
            str(p) for p in (package, package.parent / "callbacks", package.parent / "configs") if p.is_dir()
        ]
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no", "--", *paths],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


#: the packages whose versions a run's arithmetic depends on
PACKAGES = ("torch", "transformers", "peft", "lightning", "vllm", "deepspeed")


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The processor's model name (``/proc/cpuinfo`` on Linux; ``platform`` elsewhere)."""
    import platform

    try:
        for line in cpuinfo.read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> dict[str, str]:
    """What a run's arithmetic ran on besides its code: Python, the installed versions of
    :data:`PACKAGES` (those present), the CPU's model and the GPUs' (:func:`gpu_models`), if any.

    Two runs of the same code and seed on different processors or library versions may compute
    the same sums in another order, and then their sampled trajectories part after the first update.
    """
    import platform
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    out["cpu"] = cpu_model()
    gpu = gpu_models()
    if gpu is not None:
        out["gpu"] = gpu
    return out


def gpu_models() -> str | None:
    """The machine's GPUs as ``nvidia-smi`` lists them (``"NVIDIA H200 ×8"``); ``None`` without one.

    Asked of ``nvidia-smi``, not of torch: ``torch.cuda.get_device_name`` would open a CUDA context in
    the process that asks (a sweep's driver, which computes nothing), holding memory on the first GPU.
    """
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = (
        [line.strip() for line in proc.stdout.splitlines() if line.strip()] if proc.returncode == 0 else []
    )
    return ", ".join(f"{name} ×{names.count(name)}" for name in dict.fromkeys(names)) or None


def differences(before: dict[str, str], now: dict[str, str]) -> list[str]:
    """``"key: before -> now"`` for each entry of two :func:`environment` records that differs."""
    return [
        f"{key}: {before.get(key, '(none)')} -> {now.get(key, '(none)')}"
        for key in sorted(set(before) | set(now))
        if before.get(key) != now.get(key)
    ]
