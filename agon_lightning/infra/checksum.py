"""A SHA-256 beside every checkpoint, so a damaged one is refused by name instead of resumed.

``NAME.ckpt.sha256`` holds the digest of ``NAME.ckpt`` in ``sha256sum``'s format
(``HEX  NAME.ckpt``); a checkpoint written as a directory (a sharded strategy's) gets one digest
over its files' paths and contents. Resuming checks the file against it: a truncated file, or
one with a flipped byte, is refused in one message that names the file and the newest intact
checkpoint beside it. A checkpoint without a digest (written before digests were kept) still
resumes, with a note, after a check that torch's zip archive is whole.

Why the digest file may list two digests: a checkpoint and its digest are two files, and no
rename moves two files at once. A save therefore (1) lists the new file's digest beside the
current one's, (2) renames the new file into place, (3) lists the new digest alone. A kill
between any two steps leaves a checkpoint whose digest is listed, and at no point is a digest
listed for bytes that were not completely written.
"""

from __future__ import annotations

import hashlib
import os
import re
import zipfile
from collections.abc import Callable
from pathlib import Path

from agon_lightning.infra.errors import UsageError

SUFFIX = ".sha256"
PARTIAL_SUFFIX = ".partial"
_CHUNK = 1 << 20
_HEX = re.compile(r"^[0-9a-f]{64}$")


class DamagedCheckpoint(UsageError):
    """A checkpoint that cannot be what was saved: truncated, altered, or not a readable archive."""

    refused = True  # refused before it trained: RunOutputs lists nothing as this run's


def digest(path: str | Path) -> str:
    """SHA-256 of a file's bytes; of a directory, over each file's relative path and digest, in order."""
    path = Path(path)
    if path.is_dir():
        total = hashlib.sha256()
        for item in sorted(p for p in path.rglob("*") if p.is_file()):
            total.update(f"{item.relative_to(path).as_posix()}\0{digest(item)}\n".encode())
        return total.hexdigest()
    one = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            one.update(chunk)
    return one.hexdigest()


def digest_file(path: str | Path) -> Path:
    """Where the digests of ``path`` are kept: ``NAME.ckpt.sha256`` beside ``NAME.ckpt``."""
    path = Path(path)
    return path.with_name(path.name + SUFFIX)


def listed_digests(path: str | Path) -> list[str] | None:
    """The digests listed for ``path`` (``[]`` for an unreadable list); ``None``: no digest file."""
    listing = digest_file(path)
    if not listing.is_file():
        return None
    words = (line.split(maxsplit=1) for line in listing.read_text(errors="replace").splitlines())
    return [w[0] for w in words if w and _HEX.match(w[0])]


def write_digests(path: str | Path, digests: list[str]) -> None:
    """List ``digests`` for ``path``, atomically (a temporary sibling renamed into place)."""
    path, listing = Path(path), digest_file(path)
    partial = listing.with_name(f".{listing.name}{PARTIAL_SUFFIX}")
    partial.write_text("".join(f"{d}  {path.name}\n" for d in dict.fromkeys(digests)))
    os.replace(partial, listing)


def publish_with_digest(partial: str | Path, target: str | Path, move: Callable[[Path, Path], None]) -> str:
    """Move the finished ``partial`` onto ``target`` with ``move`` and keep its digest beside it.

    In the order the module docstring gives, so a kill at any point leaves ``target`` verifiable.
    Returns the new digest.
    """
    partial, target = Path(partial), Path(target)
    new = digest(partial)
    current = listed_digests(target)
    if current is None and target.exists():  # written before digests were kept: keep it verifiable too
        current = [digest(target)]
    if current:
        write_digests(target, [*current, new])
    move(partial, target)
    write_digests(target, [new])
    return new


def remove_digests(path: str | Path) -> None:
    """Delete the digest file of ``path``, if there is one."""
    digest_file(path).unlink(missing_ok=True)


def damage(path: str | Path) -> str | None:
    """Why ``path`` is not the checkpoint that was saved, or ``None`` when it is (or cannot be told).

    With a digest file, the digest decides; without one, a file must at least be a whole zip
    archive (torch's format), which a truncated file is not.
    """
    path = Path(path)
    if not path.exists():
        return "it does not exist"
    listed = listed_digests(path)
    if listed is not None:
        if digest(path) not in listed:
            return (
                f"its SHA-256 differs from the one saved in {digest_file(path).name} (truncated or altered)"
            )
        return None
    if path.is_file():
        try:
            zipfile.ZipFile(path).close()
        except (zipfile.BadZipFile, OSError) as err:
            return f"it is not a whole checkpoint archive ({err}; truncated?)"
    return None


def newest_intact(directory: str | Path, besides: str | Path | None = None) -> Path | None:
    """The most recently written checkpoint (``*.ckpt``) in ``directory`` that is intact, other than ``besides``."""
    skip = Path(besides).resolve() if besides is not None else None
    found = [p for p in Path(directory).glob("*.ckpt") if p.resolve() != skip]
    for candidate in sorted(found, key=lambda p: p.stat().st_mtime, reverse=True):
        if damage(candidate) is None:
            return candidate
    return None


def verify_checkpoint(path: str | Path) -> str | None:
    """Check ``path`` before it is resumed; a one-line note for a checkpoint without a digest, else ``None``.

    Raises:
        DamagedCheckpoint: ``path`` is truncated or altered; the message names the newest
            intact checkpoint in its directory, if any.
    """
    path = Path(path)
    problem = damage(path)
    if problem is not None:
        fallback = newest_intact(path.parent, besides=path)
        what_now = (
            f"resume from the newest intact one beside it: --ckpt_path {fallback}"
            if fallback is not None
            else f"no intact checkpoint is left in {path.parent}: start again with --overwrite"
        )
        raise DamagedCheckpoint(f"cannot resume from {path}: {problem}; {what_now}")
    if listed_digests(path) is None:
        return f"{path} has no {SUFFIX} file beside it (saved before checksums were kept): resuming it unverified"
    return None
