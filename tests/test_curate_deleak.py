"""The de-leaking validator on edits built from OpenTumorBoard's deletion-only rules (Appendix F)."""

from __future__ import annotations

from medpanel.curate.deleak import check_caption, check_deletion, new_content_words, words

SUMMARY = ("A 69-year-old man has Grade Group 2 prostate adenocarcinoma at the right base. His PSA rose from 4.4 to "
           "9.4 ng/mL. He has no bowel disease and no prior pelvic radiotherapy. He underwent a nerve-sparing "
           "prostatectomy in March, and final pathology showed pT2 disease.")


def test_a_verbatim_deletion_of_a_post_decision_fact_is_accepted_and_the_span_reported():
    edited = ("A 69-year-old man has Grade Group 2 prostate adenocarcinoma at the right base. His PSA rose from 4.4 to "
              "9.4 ng/mL. He has no bowel disease and no prior pelvic radiotherapy.")
    verdict = check_deletion(SUMMARY, edited)
    assert verdict.accepted and verdict.reasons == []
    # The removed text is exactly the source's characters, from its first removed word to its last.
    assert verdict.removed == ["He underwent a nerve-sparing prostatectomy in March, and final pathology showed pT2 disease"]
    assert verdict.removed[0] in SUMMARY


def test_deletions_in_two_places_are_two_spans():
    edited = "A 69-year-old man has prostate adenocarcinoma at the right base. His PSA rose from 4.4 to 9.4 ng/mL."
    verdict = check_deletion(SUMMARY, edited)
    assert verdict.accepted
    assert verdict.removed == ["Grade Group 2",
                               "He has no bowel disease and no prior pelvic radiotherapy. He underwent a nerve-sparing "
                               "prostatectomy in March, and final pathology showed pT2 disease"]


def test_a_trimmed_caption_that_is_a_word_subsequence_is_accepted():
    original = "PSMA PET/CT (Nov 2024) showing focal right-base uptake, SUV 13.2, and no other abnormal activity."
    verdict = check_caption(original, "PSMA PET/CT showing focal right-base uptake and no other abnormal activity")
    assert verdict.accepted, verdict
    assert verdict.removed == ["Nov 2024", "SUV 13.2"]


def test_reordered_words_are_rejected():
    original = "Axial T2 MRI showing an 11 mm PI-RADS 4 lesion in the right base."
    verdict = check_caption(original, "Axial T2 MRI showing a PI-RADS 4 lesion of 11 mm in the right base.")
    assert not verdict.accepted and "new_function_word" in verdict.reasons  # "a", "of" are not in the source
    verdict = check_caption(original, "Axial T2 MRI showing an PI-RADS 4 lesion 11 mm in the right base.")
    assert not verdict.accepted and verdict.reasons == ["reordered"] and verdict.new_words == []


def test_a_new_content_word_is_rejected_while_punctuation_and_spacing_are_not_compared():
    edited = ("A 69-year-old man has Grade Group 2 prostate adenocarcinoma at the right base. His PSA rose from 4.4 to "
              "9.4 ng/mL. He has no bowel disease and no prior pelvic radiotherapy. Surgery is planned.")
    verdict = check_deletion(SUMMARY, edited)
    assert not verdict.accepted and verdict.reasons == ["new_content_word"] and verdict.new_words == ["surgery", "is", "planned"]
    # A dropped trailing full stop, doubled spaces, a line break, capitals and curly quotes change nothing.
    source = "The patient\u2019s PSA rose to 9.4 ng/mL; MRI was negative."
    assert check_deletion(source, "the patient's  PSA rose to\n9.4 ng/mL ; MRI was negative").accepted
    # ...but a changed number is a new content word.
    assert check_deletion(source, "The patient's PSA rose to 9.8 ng/mL; MRI was negative.").new_words == ["9.8"]


def test_words_keep_clinical_tokens_whole():
    assert [w.norm for w in words("Gleason 3+4, PSA 9.4 ng/mL, PI-RADS 4, 60% of core; it doesn't.")] == \
        ["gleason", "3+4", "psa", "9.4", "ng/ml", "pi-rads", "4", "60%", "of", "core", "it", "doesn't"]


def test_one_connective_may_change_to_keep_the_prose_grammatical():
    source = "He had no bowel disease, and radiotherapy was given, but the PSA kept rising."
    verdict = check_deletion(source, "He had no bowel disease, but the PSA kept rising.")  # a plain deletion
    assert verdict.accepted and verdict.removed == ["and radiotherapy was given"]
    verdict = check_deletion("Surgery was offered and accepted, and the PSA kept rising.", "Surgery was offered but the PSA kept rising.")
    assert verdict.accepted and verdict.substitutions == [("and", "but")]
    # A caption allows none, and two changes are over the limit for a summary.
    assert check_caption("CT and MRI, and PET", "CT but MRI").reasons == ["connective_limit"]


def test_removing_a_negation_from_a_question_is_rejected():
    question = "Would you offer radiotherapy without androgen deprivation therapy to a man with no nodal disease?"
    verdict = check_deletion(question, "Would you offer radiotherapy androgen deprivation therapy to a man with no nodal disease?")
    assert not verdict.accepted and verdict.reasons == ["negation_removed"] and verdict.removed == ["without"]
    assert verdict.negations == ["without"]
    verdict = check_deletion(question, "Would you offer radiotherapy without androgen deprivation therapy to a man with nodal disease?")
    assert verdict.reasons == ["negation_removed"]
    # The negation distributes over "or": cutting "no nodal or" leaves "distant disease" asserted.
    verdict = check_deletion("Is he a candidate with no nodal or distant disease?", "Is he a candidate with distant disease?")
    assert verdict.reasons == ["negation_removed"]
    # A contraction and a two-word cue count too.
    assert check_deletion("Why doesn't the PET change staging?", "Why the PET change staging?").reasons == ["negation_removed"]
    assert check_deletion("The tumour is negative for EGFR mutations.", "The tumour is EGFR mutations.").reasons == ["negation_removed"]
    # Removing a negation with everything it governs is an ordinary deletion.
    verdict = check_deletion(question, "Would you offer radiotherapy without androgen deprivation therapy?")
    assert verdict.accepted and verdict.removed == ["to a man with no nodal disease"]
    # And a statement in a summary is held to the same rule.
    assert check_deletion(SUMMARY, SUMMARY.replace("no bowel disease and ", "bowel disease and ")).reasons == ["negation_removed"]
    assert check_deletion(SUMMARY, SUMMARY.replace("no bowel disease and ", "")).accepted
    # Adding a negation the source never had is an inferred negative: a new content word.
    assert check_deletion("Nodes were seen on PET.", "No nodes were seen on PET.").new_words == ["no"]


def test_new_content_words_checks_a_paraphrase_against_everything_visible():
    # A paraphrased question may use only content words of the de-leaked input or of the original question.
    assert new_content_words("Would you treat the base lesion?", "Treat the lesion?", "right base lesion") == []
    assert new_content_words("Would you excise the lesion?", "Treat the lesion?") == ["excise"]


# ---------------------------------------------------------------- properties over random edits

from hypothesis import given, settings, strategies as st  # noqa: E402

SOURCE_WORDS = SUMMARY.split(" ")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.booleans(), min_size=len(SOURCE_WORDS), max_size=len(SOURCE_WORDS)))
def test_any_cut_of_whole_words_is_accepted_unless_it_flips_a_negation(keep):
    edited = " ".join(w for w, k in zip(SOURCE_WORDS, keep) if k)
    verdict = check_deletion(SUMMARY, edited)
    assert set(verdict.reasons) <= {"negation_removed"}, verdict
    assert all(span in SUMMARY for span in verdict.removed)
    if all(keep):
        assert verdict.accepted and verdict.removed == []


@settings(max_examples=100, deadline=None)
@given(st.integers(0, len(SOURCE_WORDS)), st.sampled_from(["surgery", "metastatic", "12.5", "PSMA", "EGFR"]))
def test_a_word_from_outside_the_source_is_always_caught(at, word):
    edited = " ".join(SOURCE_WORDS[:at] + [word] + SOURCE_WORDS[at:])
    verdict = check_deletion(SUMMARY, edited)
    assert not verdict.accepted and verdict.reasons[0] == "new_content_word" and word.lower() in verdict.new_words
