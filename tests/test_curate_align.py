"""Slide-utterance alignment on hand-made timelines."""

from __future__ import annotations

import pytest

from medpanel.curate.align import SlideShown, Utterance, link_utterances, slide_at


def u(start, end, text="..."):
    return Utterance(start, end, "SPEAKER_00", text)


TIMELINE = [SlideShown("s1", 0, 60), SlideShown("s2", 60, 120), SlideShown("s3", 150, 200)]  # a gap 120-150


def test_an_utterance_inside_one_slide_takes_that_slide():
    [link] = link_utterances([u(10, 20)], TIMELINE)
    assert (link.slide_id, link.overlap) == ("s1", 10)


def test_an_utterance_spanning_two_slides_takes_the_one_covering_most_of_it():
    assert [(x.slide_id, x.overlap) for x in link_utterances([u(50, 80), u(40, 65)], TIMELINE)] == [("s2", 20), ("s1", 20)]


def test_an_exact_tie_goes_to_the_slide_shown_earlier():
    assert slide_at(50, 70, TIMELINE) == ("s1", 10)
    # Listed order does not matter: the earlier-shown slide still wins.
    assert slide_at(50, 70, list(reversed(TIMELINE))) == ("s1", 10)


def test_in_a_gap_there_is_no_slide_and_across_a_gap_the_covered_part_counts():
    assert slide_at(125, 145, TIMELINE) == (None, 0.0)
    assert slide_at(110, 160, TIMELINE) == ("s2", 10)  # 10 s of s2, 10 s of s3: tie, earlier slide
    assert slide_at(115, 170, TIMELINE) == ("s3", 20)
    assert slide_at(300, 310, TIMELINE) == (None, 0.0)
    assert [x.slide_id for x in link_utterances([u(1, 2)], [])] == [None]


def test_overlapping_slide_intervals_compare_by_overlap():
    # A picture-in-picture second slide overlapping the first: the longer overlap wins.
    slides = [SlideShown("main", 0, 100), SlideShown("inset", 30, 50)]
    assert slide_at(25, 55, slides) == ("main", 30)
    assert slide_at(35, 45, slides) == ("main", 10)  # tie at 10 s: "main" was shown earlier
    assert slide_at(35, 45, [SlideShown("inset", 30, 50), SlideShown("late", 35, 45)]) == ("inset", 10)


def test_an_instant_takes_the_slide_on_screen_then_with_half_open_intervals():
    assert slide_at(60, 60, TIMELINE)[0] == "s2"
    assert slide_at(130, 130, TIMELINE)[0] is None


def test_links_keep_order_and_inputs_and_refuse_backwards_times():
    utterances = [u(150, 160, "b"), u(0, 5, "a")]
    links = link_utterances(utterances, TIMELINE)
    assert [(x.utterance.text, x.slide_id) for x in links] == [("b", "s3"), ("a", "s1")]
    assert utterances == [u(150, 160, "b"), u(0, 5, "a")]
    with pytest.raises(ValueError, match="ends"):
        slide_at(10, 5, TIMELINE)
    with pytest.raises(ValueError, match="Slide bad"):
        slide_at(1, 2, [SlideShown("bad", 9, 3)])


def test_min_share_leaves_a_slide_put_up_as_an_utterance_ends_unlinked():
    slides = [SlideShown("late", 9.5, 20.0)]
    assert slide_at(0.0, 10.0, slides) == ("late", 0.5)  # the released rule: any overlap counts
    assert slide_at(0.0, 10.0, slides, min_share=0.25) == (None, 0.0)
    assert slide_at(0.0, 10.0, slides, min_share=0.05) == ("late", 0.5)
    assert slide_at(12.0, 12.0, slides, min_share=0.25) == ("late", 0.0)  # an instant takes what is on screen
