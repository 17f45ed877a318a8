"""Split curated cases into train/dev/test by recording.

Why: several cases come from one recorded meeting and share its speakers, slides and habits of speech,
so a split by case would leak a meeting into both training and test. OpenTumorBoard partitions its
recordings 60/10/30 (paper, section 2.3: 66 of 219 recordings in test). Sizes are counted in recordings,
apportioned by largest remainder; which recordings go where is decided by a seeded hash of each
recording's id, so the split does not depend on the order cases arrive in, nor on the Python version.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable, Generic, Sequence, TypeVar

T = TypeVar("T")
SPLITS = ("train", "dev", "test")
RATIOS = (0.6, 0.1, 0.3)


@dataclass
class Split(Generic[T]):
    """The cases of each split (in their input order) and the recordings each holds (sorted)."""

    train: list[T] = field(default_factory=list)
    dev: list[T] = field(default_factory=list)
    test: list[T] = field(default_factory=list)
    recordings: dict[str, list[str]] = field(default_factory=dict)


def apportion(n: int, ratios: Sequence[float] = RATIOS) -> list[int]:
    """Whole counts summing to n, as close to `ratios` as whole numbers allow (largest remainder; ties
    go to the earlier split). 20 -> [12, 2, 6]; 219 -> [131, 22, 66]."""
    total = sum(ratios)
    if len(ratios) != len(SPLITS) or total <= 0 or any(r < 0 for r in ratios):
        raise ValueError(f"ratios must be three non-negative numbers with a positive sum, not {list(ratios)}.")
    exact = [n * r / total for r in ratios]
    counts = [int(x) for x in exact]
    order = sorted(range(len(ratios)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts


def _rank(seed: int | str, recording: str) -> str:
    return hashlib.sha256(f"{seed}\x00{recording}".encode()).hexdigest()


def split_by_recording(cases: Sequence[T], recording_of: Callable[[T], str], seed: int | str = 0,
                       ratios: Sequence[float] = RATIOS) -> Split[T]:
    """Every case of one recording in one split; recordings shuffled by `seed` and cut at the
    apportioned counts (train first, then dev, then test)."""
    recordings = sorted({str(recording_of(c)) for c in cases}, key=lambda r: (_rank(seed, r), r))
    counts = apportion(len(recordings), ratios)
    where: dict[str, str] = {}
    at = 0
    for name, count in zip(SPLITS, counts):
        for rec in recordings[at:at + count]:
            where[rec] = name
        at += count
    out: Split[T] = Split(recordings={name: sorted(r for r, s in where.items() if s == name) for name in SPLITS})
    for case in cases:
        getattr(out, where[str(recording_of(case))]).append(case)
    return out


def assign_recordings(recordings: Sequence[str], seed: int | str = 0, previous: dict[str, str] | None = None,
                      ratios: Sequence[float] = RATIOS) -> dict[str, str]:
    """Recording -> split. Without `previous`, as split_by_recording. With it (the assignment an earlier
    run wrote), a recording placed before stays where it was, so adding or losing a recording never moves
    another between train and test; each new one (in seeded order) goes to the split furthest below its
    apportioned share of the new total."""
    names = sorted(set(recordings))
    kept = {r: s for r, s in (previous or {}).items() if r in names and s in SPLITS}
    if not kept:
        split = split_by_recording(names, lambda r: r, seed=seed, ratios=ratios)
        return {r: name for name in SPLITS for r in split.recordings[name]}
    target = dict(zip(SPLITS, apportion(len(names), ratios)))
    count = {name: sum(1 for s in kept.values() if s == name) for name in SPLITS}
    out = dict(kept)
    for rec in sorted((r for r in names if r not in kept), key=lambda r: (_rank(seed, r), r)):
        name = max(SPLITS, key=lambda n: (target[n] - count[n], -SPLITS.index(n)))
        out[rec] = name
        count[name] += 1
    return out
