"""Allowed replica counts of a job (R16), as clients give them: a list, a step, or powers of two.

Contract: pure. ``expand(spec, low, high)`` turns what a client sent into the explicit ascending list of
counts within ``low..high`` (``min_replicas..max_replicas``) that the scheduler stores and obeys, or raises
``ValueError`` with a message that says what to fix. ``min_replicas`` and ``max_replicas`` must themselves be
allowed counts: the gang starts at the first and the job never grows past the second.

Forms: ``[1, 2, 4, 8]``; ``{"step": 2}`` (``min_replicas``, ``min_replicas + 2``, ...); ``"powers_of_two"``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

POWERS_OF_TWO = "powers_of_two"
Spec = Sequence[int] | Mapping[str, int] | str


def expand(spec: Spec, low: int, high: int) -> list[int]:
    """The explicit allowed counts (see the module contract)."""
    if isinstance(spec, str):
        sizes = [n for n in (1 << i for i in range(11)) if low <= n <= high]
        form = "a power of two"
    elif isinstance(spec, Mapping):
        step = spec["step"]
        sizes = list(range(low, high + 1, step))
        form = f"min_replicas ({low}) plus a multiple of the step {step}"
    else:
        outside = [n for n in spec if not low <= n <= high]
        if outside:
            raise ValueError(
                f"allowed_replicas: {outside[0]} is outside min_replicas..max_replicas ({low}..{high}): "
                "drop it or widen the bounds"
            )
        sizes = sorted(set(spec))
        form = "in the list"
    for field, n in (("min_replicas", low), ("max_replicas", high)):
        if n not in sizes:
            near = ", ".join(str(s) for s in sizes) or "none"
            raise ValueError(
                f"allowed_replicas: {field} ({n}) is not {form}; the allowed counts within {low}..{high} are "
                f"{near}: make {field} one of them"
            )
    return sizes


def cli_spec(text: str) -> Spec:
    """The REST form of the CLI's ``--allowed-replicas`` value: ``1,2,4,8``, ``step:2`` or ``powers-of-two``."""
    word = text.strip().lower().replace("-", "_")
    if word == POWERS_OF_TWO:
        return POWERS_OF_TWO
    if word.startswith("step:") or word.startswith("step="):
        number = word[5:]
        if not number.isdigit() or int(number) < 1:
            raise ValueError(f"--allowed-replicas step:N needs a whole number N >= 1, got {text!r}")
        return {"step": int(number)}
    parts = [p.strip() for p in word.split(",")]
    if not parts or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise ValueError(
            f"--allowed-replicas expects counts like 1,2,4,8, or step:N, or powers-of-two; got {text!r}"
        )
    return [int(p) for p in parts]
