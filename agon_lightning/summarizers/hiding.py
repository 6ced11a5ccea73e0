"""What no summary may show: an answer the draft gives, however it is written.

A challenger that finds its rival's answer in the summary can copy it; where the rival is
graded wrong and the copy right (the draft left its answer block open, gave two of them, or
restated the answer as ``114.0``), the copy earns the conversion bonus for nothing. So every
built-in summarizer follows one rule:

    The draft's answers are its answer spans (:func:`~agon_lightning.game.text.answer_spans`: every
    ``<answer>`` block and every ``\\boxed{}``, finished or left open, anywhere in the draft;
    for code, every block of the program). Every span is cut from what the summary shows, and
    every token left that normalises to the content of any of them is masked. A draft with no
    answer span after its trace (cut off, or finished, before it stated one) has no summary at
    all: any of its results could be the answer it was about to give.

A token normalises to a value as the graders compare answers: case, whitespace, surrounding
``$`` and a trailing period do not count (``ExactMatchVerifier``), and plain numbers compare by
value (math-verify): integers, decimals, ``a/b`` and ``\\frac{a}{b}``, so ``114.0``, ``+114``,
``114.00`` and ``\\frac{228}{2}`` all read ``114``. A value also stands for what a ``\\text{}``
around it holds and for the right side of an equation (``x = 114`` → ``114``). A token glued
to a letter, a digit or a decimal point is part of a longer one and stays (``1140``, ``11.4``,
``x114``): the intermediate results a summary exists to show survive. A sign in front of a
number may be its own or an operator (``17-114``), so both readings count: ``-114`` is masked
whole when the answer is ``-114`` and shows as ``-?`` when it is ``114``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from decimal import Decimal
from fractions import Fraction

from agon_lightning.game.text import after_thinking, answer_spans
from agon_lightning.verifiers.exact import normalize_answer

ANSWER_MASK = "?"
# Longest answer whose readings are worked out: graders compare short expressions, and a span
# is cut from the summary whatever its length (this bounds the work on adversarial drafts).
MAX_ANSWER_CHARS = 2000

_WORD = re.compile(r"[0-9a-z_]")
_FRAC = r"\\[dt]?frac\s*(?:\{\s*(\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d))"
_DECIMAL = r"(?:\d+(?:\.\d+)?|\.\d+)(?:[eE][+-]?\d{1,4})?"
# A number as a rival could copy it: with a sign in front (``17-114`` holds ``-114``), or not
# glued to a word, a digit or a point; not followed by one either.
_NUMBER = re.compile(rf"(?:([+-])|(?<![0-9A-Za-z_.]))({_FRAC}|\d+/\d+|{_DECIMAL})(?![0-9A-Za-z_])(?!\.\d)")
_WRAPPED = re.compile(r"\\(?:text|textbf|mathrm|mathbf|operatorname)\s*\{(.*)\}", re.DOTALL)

Number = Fraction | Decimal


def number_value(body: str) -> Number | None:
    """The value of an unsigned number as :data:`_NUMBER` reads it (``None``: not a number)."""
    frac = re.fullmatch(_FRAC, body)
    try:
        if frac:
            top, bottom = frac[1] or frac[2], frac[3] or frac[4]
            return Fraction(int(top), int(bottom)) if int(bottom) else None
        if re.fullmatch(r"\d+/\d+", body):
            top, bottom = body.split("/")
            return Fraction(int(top), int(bottom)) if int(bottom) else None
        return Decimal(body) if re.fullmatch(_DECIMAL, body) else None
    except ValueError:  # digits beyond what int() parses
        return None


def readings(content: str) -> set[str]:
    """What a rival could copy as this answer: the content, unwrapped from ``\\text{}``, and
    the right side of its last ``=``, each normalised like :func:`normalize_answer`."""
    found = {content}
    if "=" in content:
        found.add(content.rsplit("=", 1)[1])
    for text in list(found):
        wrapped = _WRAPPED.fullmatch(normalize_answer(text, case_sensitive=True))
        if wrapped:
            found.add(wrapped[1])
    return {value for value in (normalize_answer(text) for text in found) if value}


def stated_answers(text: str) -> set[str]:
    """The readings of every answer ``text`` states (its answer spans, trace included)."""
    values: set[str] = set()
    for span in answer_spans(text):
        if span.inner_end - span.inner_start <= MAX_ANSWER_CHARS:
            content = text[span.inner_start : span.inner_end]
            if span.end == len(text):  # left open: a closing tag it was cut off inside is no part of it
                tag = content.rfind("<")
                content = content[:tag] if tag >= 0 and "</answer>".startswith(content[tag:]) else content
            values |= readings(content)
    return values


def _merged(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` sorted, each run of overlapping ones made one."""
    runs: list[list[int]] = []
    for start, end in sorted(spans):
        if runs and start < runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], end)
        else:
            runs.append([start, end])
    return [(start, end) for start, end in runs]


def replace_spans(text: str, spans: Iterable[tuple[int, int]], filler: str) -> str:
    """``text`` with each run of overlapping ``(start, end)`` spans replaced by one ``filler``."""
    pieces, last = [], 0
    for start, end in _merged(spans):
        pieces += [text[last:start], filler]
        last = end
    return "".join(pieces) + text[last:]


def cut_spans(text: str, spans: Iterable[tuple[int, int]]) -> str:
    """``text`` without ``spans``; a space stays where a cut would join two non-space characters,
    so that no new token, tag or box forms where the pieces meet."""
    pieces, last = [], 0
    for start, end in _merged(spans):
        joins = 0 < start and end < len(text) and not text[start - 1].isspace() and not text[end].isspace()
        pieces += [text[last:start], " " if joins else ""]
        last = end
    return "".join(pieces) + text[last:]


def _glued(text: str, index: int, toward: int) -> bool:
    """Whether ``text[index]`` (just outside a match) continues a token: a word character, or a
    decimal point followed (``toward=+1``) or preceded (``-1``) by a digit."""
    if not 0 <= index < len(text):
        return False
    if _WORD.match(text[index].lower()):
        return True
    beyond = index + toward
    return text[index] == "." and 0 <= beyond < len(text) and text[beyond].isdigit()


def _fold(char: str) -> str:
    lower = char.lower()
    return lower if len(lower) == 1 else char


def _squeeze(text: str) -> tuple[str, list[int]]:
    """``text`` case-folded without whitespace, except one space where whitespace parts two word
    characters (``11 4`` is two numbers, ``x + 1`` is ``x+1``); and where each character came from."""
    chars, where = [], []
    gap = None
    for i, char in enumerate(text):
        if char.isspace():
            gap = i if gap is None else gap
            continue
        folded = _fold(char)
        if gap is not None and chars and _WORD.match(chars[-1]) and _WORD.match(folded):
            chars.append(" ")
            where.append(gap)
        chars.append(folded)
        where.append(i)
        gap = None
    return "".join(chars), where


def value_spans(text: str, values: set[str]) -> list[tuple[int, int]]:
    """Where in ``text`` a token normalises to one of ``values`` (see the module docstring)."""
    squeezed, where = _squeeze(text)
    spans = []
    for value in values:
        needle = _squeeze(value)[0]
        at = squeezed.find(needle) if needle else -1
        while at >= 0:
            start, end = where[at], where[at + len(needle) - 1] + 1
            glued_before = _WORD.match(needle[0]) and _glued(text, start - 1, -1)
            glued_after = _WORD.match(needle[-1]) and _glued(text, end, +1)
            if not glued_before and not glued_after:
                spans.append((start, end))
            at = squeezed.find(needle, at + 1)
    numbers = {number for number in map(_signed_value, values) if number is not None}
    for match in _NUMBER.finditer(text) if numbers else ():
        value = number_value(match[2])
        if value is None:
            continue
        if (-value if match[1] == "-" else value) in numbers:
            spans.append(match.span())
        elif match[1] and value in numbers:  # "-114" when the answer is 114: the sign may be an operator
            spans.append(match.span(2))
    return spans


def _signed_value(value: str) -> Number | None:
    match = _NUMBER.fullmatch(value)
    number = None if match is None else number_value(match[2])
    return None if number is None else (-number if match[1] == "-" else number)


def mask_answers(text: str, values: set[str], mask: str = ANSWER_MASK) -> str:
    """``text`` with every token that normalises to one of ``values`` replaced by ``mask``.

    A mask can leave a neighbour standing alone (``1\\frac{2}{2}`` → ``?\\frac{2}{2}`` when the
    answer is 1), so masking repeats until no token is left. Values the mask itself holds are
    skipped: it could not hide them. With a one-character mask each pass shortens the text or
    masks a character that was not one, so ``2 * len(text)`` passes always suffice; the bound
    only matters for a longer custom mask.
    """
    inside_mask = _squeeze(mask)[0]
    values = {value for value in values if _squeeze(value)[0] not in inside_mask}
    for _ in range(2 * len(text) + 1):
        spans = [(start, end) for start, end in value_spans(text, values) if text[start:end] != mask]
        if not spans:
            break
        text = replace_spans(text, spans, mask)
    return text


def hide_answers(shown: str, draft: str, mask: str = ANSWER_MASK, max_chars: int = 0) -> str | None:
    """``shown`` (the part of ``draft`` a summary shows) under the module's rule, stripped.

    Every answer span of ``shown`` is cut (:func:`cut_spans`) and every token that normalises
    to an answer ``draft`` states is masked. ``None`` when ``draft`` states no answer after its
    trace: there is no summary. ``max_chars`` (0: no limit) shortens the result, masked again
    since shortening can turn a number into the answer (``1140`` → ``114``).
    """
    tail = after_thinking(draft)
    if tail is None or not answer_spans(tail):
        return None
    values = stated_answers(draft)
    summary = mask_answers(cut_spans(shown, [span[:2] for span in answer_spans(shown)]), values, mask)
    if max_chars:
        summary = mask_answers(summary.strip()[:max_chars], values, mask)
    return summary.strip()


# ---------------------------------------------------------------------------------------------
# Countdown: no expression that uses every given number
# ---------------------------------------------------------------------------------------------
#
# In Countdown the answer is an expression over the given numbers, and any expression that uses
# every one of them (``9*3+8``, or the claims ``9*3=27`` and ``27+8=35`` taken together) is an
# answer a challenger could copy without searching, whether or not the draft gave it. So for a
# problem with numbers N, a summary shows no *full use*: no arithmetic in it (a bare expression
# or a claim ``E = v``), alone or composed with others through the values they produce, combines
# all of N. Composing follows the values: a claim's result can be an operand of a later one, and
# each given number is used at most once; operands that are neither (``27+8+5`` when 5 was not
# given) do not stop a piece from combining the ones it uses. Where a full use is found, the last piece of it reads
# ``?``, until none is left; a summary with more pieces than :data:`MAX_PIECES` has all of them
# masked (the search over compositions grows with their number, and no honest summary has so many).

MAX_PIECES = 6
_OPERAND = r"\(*\s*\d+\s*\)*"
_PIECE = re.compile(rf"{_OPERAND}(?:\s*[-+*/]\s*{_OPERAND})+(?:\s*=\s*(-?\d+))?")
_INT = re.compile(r"\d+")


def arithmetic_pieces(text: str) -> list[tuple[int, int, list[int], int | None]]:
    """``(start, end, operands, result)`` of each expression or claim in ``text``.

    A claim's result may start the next piece (``8*9=72+3`` holds ``8*9=72`` and ``72+3``).
    """
    pieces, pos = [], 0
    while (match := _PIECE.search(text, pos)) is not None:
        body_end = match.start(1) if match[1] is not None else match.end()
        body = text[match.start() : body_end].rstrip().rstrip("=")
        result = int(match[1]) if match[1] is not None else None
        start = match.start() + len(match[0]) - len(match[0].lstrip())
        pieces.append((start, match.end(), [int(n) for n in _INT.findall(body)], result))
        pos = match.start(1) if match[1] is not None and not match[1].startswith("-") else match.end()
        pos = max(pos, match.start() + 1)
    return pieces


def _covers(pool: list[tuple[int, int]], operands: list[int]) -> tuple[list[tuple[int, int]], int]:
    """The pool without ``operands`` (each the entry of that value covering most given numbers),
    and how many given numbers they cover together; an operand not in the pool covers none (a
    piece that also uses other numbers still uses the ones it takes)."""
    rest, covered = list(pool), 0
    for value in operands:
        matches = [k for k, (v, _) in enumerate(rest) if v == value]
        if matches:
            covered += rest.pop(max(matches, key=lambda k: rest[k][1]))[1]
    return rest, covered


def full_use(numbers: list[int], pieces: list[tuple[list[int], int | None]]) -> list[int] | None:
    """Indices of a sequence of ``pieces`` that together combine every number, or ``None``."""
    whole = len(numbers)

    def extend(pool: list[tuple[int, int]], used: list[int]) -> list[int] | None:
        for k, (operands, result) in enumerate(pieces):
            if k in used:
                continue
            rest, covered = _covers(pool, operands)
            if covered < 2:  # takes at most one given number or result: combines nothing
                continue
            if covered >= whole:
                return [*used, k]
            found = extend(rest + ([(result, covered)] if result is not None else []), [*used, k])
            if found:
                return found
        return None

    return extend([(n, 1) for n in numbers], [])


def mask_full_uses(text: str, numbers: list[int], mask: str = ANSWER_MASK) -> str:
    """``text`` with pieces masked until none of its arithmetic combines every one of ``numbers``."""
    if len(numbers) < 2:
        raise ValueError(f"a Countdown problem has at least two numbers, got {numbers}")
    while True:
        pieces = arithmetic_pieces(text)
        if len(pieces) > MAX_PIECES:
            return replace_spans(text, [(start, end) for start, end, _, _ in pieces], mask)
        found = full_use(numbers, [(operands, result) for _, _, operands, result in pieces])
        if found is None:
            return text
        start, end, _, _ = pieces[found[-1]]
        text = replace_spans(text, [(start, end)], mask)
