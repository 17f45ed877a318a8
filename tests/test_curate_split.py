"""Train/dev/test by recording, 60/10/30, seeded."""

from __future__ import annotations

import random

import pytest

from medpanel.curate.split import apportion, assign_recordings, split_by_recording


def cases(recordings=20, seed=1):
    """Cases as (recording, case id), 1 to 5 cases per recording."""
    rng = random.Random(seed)
    return [(f"rec{r:02d}", f"rec{r:02d}-case{c}") for r in range(recordings) for c in range(rng.randint(1, 5))]


def test_the_same_seed_gives_the_same_split_whatever_the_input_order():
    items = cases()
    first = split_by_recording(items, lambda c: c[0], seed=7)
    shuffled = list(items)
    random.Random(3).shuffle(shuffled)
    again = split_by_recording(shuffled, lambda c: c[0], seed=7)
    assert first.recordings == again.recordings
    assert sorted(first.test) == sorted(again.test)
    other = split_by_recording(items, lambda c: c[0], seed=8)
    assert other.recordings != first.recordings  # a different seed draws a different split


def test_no_recording_is_in_two_splits_and_every_case_is_placed_once():
    items = cases()
    split = split_by_recording(items, lambda c: c[0], seed=0)
    seen = [set(split.recordings[name]) for name in ("train", "dev", "test")]
    assert not (seen[0] & seen[1]) and not (seen[0] & seen[2]) and not (seen[1] & seen[2])
    for name in ("train", "dev", "test"):
        assert {rec for rec, _ in getattr(split, name)} == set(split.recordings[name])
    assert sorted(split.train + split.dev + split.test) == sorted(items)
    assert split.train == [c for c in items if c in split.train]  # input order kept within a split


def test_twenty_recordings_split_12_2_6():
    split = split_by_recording(cases(), lambda c: c[0], seed=42)
    assert [len(split.recordings[n]) for n in ("train", "dev", "test")] == [12, 2, 6]


@pytest.mark.parametrize(("n", "counts"), [(20, [12, 2, 6]), (219, [131, 22, 66]), (7, [4, 1, 2]), (1, [1, 0, 0]), (0, [0, 0, 0])])
def test_apportion_by_largest_remainder(n, counts):
    # 219 recordings: 131.4 / 21.9 / 65.7 -> the paper's 66 test recordings.
    assert apportion(n) == counts


def test_bad_ratios_are_refused():
    with pytest.raises(ValueError):
        apportion(10, (0.5, 0.5))


def test_assign_recordings_keeps_earlier_placements_when_recordings_come_and_go():
    names = [f"rec{i:02d}" for i in range(20)]
    first = assign_recordings(names, seed=3)
    split = split_by_recording(names, lambda r: r, seed=3)
    assert first == {r: name for name in ("train", "dev", "test") for r in split.recordings[name]}
    # Ten more recordings, and two of the first gone: no earlier recording moves, and the new total is
    # apportioned as closely as the fixed placements allow.
    more = [n for n in names if n not in ("rec00", "rec01")] + [f"new{i}" for i in range(10)]
    second = assign_recordings(more, seed=3, previous=first)
    assert all(second[r] == first[r] for r in more if r in first)
    counts = [sum(1 for v in second.values() if v == name) for name in ("train", "dev", "test")]
    assert sum(counts) == 28 and abs(counts[0] - 17) <= 1 and abs(counts[2] - 8) <= 1
    assert assign_recordings(more, seed=3, previous=first) == second  # the same inputs, the same placement
    assert assign_recordings(["a"], previous={"a": "bogus"}) == {"a": "train"}  # an unknown split is not kept
