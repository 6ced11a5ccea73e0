"""A step's rows by problem: keep some problems of a :class:`StepRecord`, or put several records together.

A game lays out each role's rows problem-major: problem ``p``'s rows are one contiguous block of
``rows // P`` rows (N drafts in Agon and GRPO; N·m answers of the solver in challenger-solver).
What reads a step by problem — dynamic sampling drops the problems whose groups carry no
gradient and plays others in their place — selects those blocks in every role at once, with the
per-row lists that go with them (``summaries``) and the opponent each challenge row was paired
with (``opponents``, renumbered into the kept draft rows).

Records put together keep the first record's step, game terms (``reward_terms``) and league
metrics: those describe one play, not rows, and cannot be recomputed from the rows.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor

from agon_lightning.games.records import RoleRollout, StepRecord
from agon_lightning.rollout.base import RolloutBatch


# ---------------------------------------------------------------------------------------------
# Rows of a batch
# ---------------------------------------------------------------------------------------------
def problem_rows(keep: list[int], width: int) -> Tensor:
    """``[len(keep) * width]`` the row indices of problems ``keep`` in a problem-major batch of ``width`` rows each."""
    return torch.tensor([p * width + j for p in keep for j in range(width)], dtype=torch.long)


def width_of(rows: int, problems: int, what: str) -> int:
    """Rows per problem of ``what``; raises ``ValueError`` unless ``rows`` splits into ``problems`` blocks."""
    if problems == 0 or rows % problems:
        raise ValueError(f"{what} has {rows} rows, which do not split into {problems} problems' blocks")
    return rows // problems


def take_rows(batch: RolloutBatch, rows: Tensor) -> RolloutBatch:
    """Rows ``rows`` of ``batch`` (any order, repeats allowed)."""
    on = rows.to(batch.completion_ids.device)
    index = rows.tolist()
    return RolloutBatch(
        batch.prompt_ids[on], batch.prompt_mask[on], batch.completion_ids[on], batch.completion_mask[on],
        [batch.texts[i] for i in index], batch.lengths[on], batch.truncated[on],
        None if batch.logprobs is None else batch.logprobs[on],
        None if batch.versions is None else [batch.versions[i] for i in index],
    )  # fmt: skip


def _pad(t: Tensor, width: int, value: float, left: bool) -> Tensor:
    extra = width - t.shape[1]
    if extra == 0:
        return t
    fill = torch.full((t.shape[0], extra), value, dtype=t.dtype, device=t.device)
    return torch.cat([fill, t] if left else [t, fill], dim=1)


def cat_batches(batches: list[RolloutBatch], pad_id: int) -> RolloutBatch:
    """The batches' rows one after another: prompts left-padded, completions right-padded to a common width.

    Padding takes ``pad_id`` and mask 0 (sampling log-probs 0), as a backend pads its own batch.
    """
    prompt = max(b.prompt_ids.shape[1] for b in batches)
    completion = max(b.completion_ids.shape[1] for b in batches)

    def cat(parts: list[Tensor], width: int, value: float, left: bool) -> Tensor:
        return torch.cat([_pad(t, width, value, left) for t in parts])

    logprobs = [b.logprobs for b in batches]
    versions = [b.versions for b in batches]
    return RolloutBatch(
        cat([b.prompt_ids for b in batches], prompt, pad_id, True),
        cat([b.prompt_mask for b in batches], prompt, 0, True),
        cat([b.completion_ids for b in batches], completion, pad_id, False),
        cat([b.completion_mask for b in batches], completion, 0, False),
        [t for b in batches for t in b.texts],
        torch.cat([b.lengths for b in batches]),
        torch.cat([b.truncated for b in batches]),
        None if any(lp is None for lp in logprobs) else cat(logprobs, completion, 0.0, False),  # type: ignore[arg-type]
        None if any(v is None for v in versions) else [x for v in versions for x in v],  # type: ignore[union-attr]
    )


# ---------------------------------------------------------------------------------------------
# Roles and records
# ---------------------------------------------------------------------------------------------
def _per_row(t: Tensor | None, rows: int) -> bool:
    """Whether ``t`` holds one entry per row (advantages are empty until set)."""
    return t is not None and t.numel() > 0 and t.shape[0] == rows


def select_role(role: RoleRollout, rows: Tensor) -> RoleRollout:
    """Rows ``rows`` of a role, with every per-row field (advantages and old log-probs when set)."""
    n = len(role.rollouts)
    return replace(
        role,
        rollouts=take_rows(role.rollouts, rows),
        verdicts=[role.verdicts[i] for i in rows.tolist()],
        rewards=role.rewards[rows.to(role.rewards.device)],
        advantages=role.advantages[rows.to(role.advantages.device)] if _per_row(role.advantages, n) else role.advantages,
        old_logp=role.old_logp[rows.to(role.old_logp.device)] if _per_row(role.old_logp, n) else role.old_logp,  # type: ignore[union-attr]
        versions=None if role.versions is None else role.versions[rows.to(role.versions.device)],
    )  # fmt: skip


def cat_roles(roles: list[RoleRollout], pad_id: int) -> RoleRollout:
    """One role's rows from several plays, one after another.

    Raises:
        ValueError: the parts are not one role (role, adapter, group size or KL reference differ).
    """
    first = roles[0]
    for other in roles[1:]:
        mine = (first.role, first.adapter, first.group_size, first.reference)
        theirs = (other.role, other.adapter, other.group_size, other.reference)
        if mine != theirs:
            raise ValueError(
                f"cannot put rows of role {theirs[0]!r} (adapter {theirs[1]!r}, group_size {theirs[2]}, "
                f"reference {theirs[3]}) after rows of role {mine[0]!r} (adapter {mine[1]!r}, group_size "
                f"{mine[2]}, reference {mine[3]}): the plays cast their roles differently"
            )

    def cat(field: str) -> Tensor | None:
        parts = [getattr(r, field) for r in roles]
        if all(_per_row(t, len(r.rollouts)) for t, r in zip(parts, roles)):
            return torch.cat(parts)
        return None

    advantages = cat("advantages")
    return replace(
        first,
        rollouts=cat_batches([r.rollouts for r in roles], pad_id),
        verdicts=[v for r in roles for v in r.verdicts],
        rewards=torch.cat([r.rewards for r in roles]),
        advantages=torch.zeros(0) if advantages is None else advantages,
        old_logp=cat("old_logp"),
        versions=cat("versions"),
    )


def select_problems(record: StepRecord, keep: list[int]) -> StepRecord:
    """The record of problems ``keep`` alone (indices into ``record.problems``, in the order given).

    Every role, the rival's drafts, the summaries and the opponents keep the rows of those
    problems; each role's rows per problem are its rows over the step's problems.

    Raises:
        ValueError: a role's rows (or the summaries) do not split into one block per problem, or
            an opponent row belongs to another problem than its challenge's.
    """
    count = len(record.problems)

    def role(r: RoleRollout) -> RoleRollout:
        return select_role(r, problem_rows(keep, width_of(len(r.rollouts), count, f"role {r.role!r}")))

    out = replace(
        record,
        problems=[record.problems[p] for p in keep],
        draft=role(record.draft),
        challenge=None if record.challenge is None else role(record.challenge),
        others=[role(r) for r in record.others],
        rival_drafts=None if record.rival_drafts is None else role(record.rival_drafts),
        summaries=[],
        opponents=None,
    )
    if record.summaries:
        rows = problem_rows(keep, width_of(len(record.summaries), count, "the summaries"))
        out.summaries = [record.summaries[i] for i in rows.tolist()]
    if record.opponents is not None:
        out.opponents = _kept_opponents(record, keep)
    return out


def _kept_opponents(record: StepRecord, keep: list[int]) -> Tensor:
    """The opponents of the kept challenge rows, renumbered into the kept draft rows."""
    count = len(record.problems)
    read = record.draft if record.rival_drafts is None else record.rival_drafts
    drafts = width_of(len(read.rollouts), count, "the drafts read")
    opponents = record.opponents.cpu()  # type: ignore[union-attr]
    challenges = width_of(len(opponents), count, "the opponents")
    out = []
    for new, p in enumerate(keep):
        block = opponents[p * challenges : (p + 1) * challenges]
        if bool(((block < p * drafts) | (block >= (p + 1) * drafts)).any()):
            raise ValueError(
                f"a challenge of problem {p} was paired with a draft of another problem (opponents {block.tolist()}, "
                f"its drafts are rows {p * drafts}..{(p + 1) * drafts - 1}): its rows cannot be kept by problem"
            )
        out.append(block - p * drafts + new * drafts)
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.long)


def cat_records(records: list[StepRecord], pad_id: int) -> StepRecord:
    """Several plays of one step as one record: their problems and every role's rows one after another.

    The first record's step, game terms and league metrics are kept (see the module's docstring).

    Raises:
        ValueError: the records do not have the same roles (or one has a rival's drafts, another not).
    """
    first = records[0]
    if len(records) == 1:
        return first
    shapes = {(len(r.roles), r.rival_drafts is None, r.opponents is None, bool(r.summaries)) for r in records}
    if len(shapes) > 1:
        raise ValueError(
            "cannot put together plays whose records differ in shape (roles, rival's drafts, opponents, "
            f"summaries): {sorted(shapes)}"
        )
    roles = [cat_roles(list(parts), pad_id) for parts in zip(*(r.roles for r in records))]
    out = replace(
        first,
        problems=[p for r in records for p in r.problems],
        draft=roles[0],
        challenge=roles[1] if first.challenge is not None else None,
        others=roles[2 if first.challenge is not None else 1 :],
        summaries=[s for r in records for s in r.summaries],
    )
    if first.rival_drafts is not None:
        out.rival_drafts = cat_roles([r.rival_drafts for r in records], pad_id)  # type: ignore[misc]
    if first.opponents is not None:
        offsets, total = [], 0
        for r in records:
            offsets.append(total)
            total += len((r.draft if r.rival_drafts is None else r.rival_drafts).rollouts)
        parts = [r.opponents.cpu() + o for r, o in zip(records, offsets)]  # type: ignore[union-attr]
        out.opponents = torch.cat(parts)
    return out
