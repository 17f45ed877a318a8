"""The curation stages' prompts, written for this project (the paper's are not reproduced), and the
answer shapes each stage asks for. Short, so the embedded 135M model can hold them; every answer is a
JSON object under a schema, so a small model is held to its form by grammar.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

# The paper's ten specialist roles (section 2.3), and Other for everyone else.
ROLES = ("Moderator", "Pathologist", "Radiologist", "Medical Oncologist", "Radiation Oncologist", "Surgeon",
         "Molecular Pathologist", "Genetic Counselor", "Clinical Trial Specialist", "Nurse Navigator", "Other")
# The paper's nine specialist-turn types (Appendix A).
TURN_TYPES = ("clarification_question", "findings_interpretation", "agreement_or_support", "next_action_suggestion",
              "uncertainty", "eligibility_assessment", "treatment_recommendation", "clinical_trial_suggestion",
              "evidence_discussion")

Role = Literal[ROLES]  # type: ignore[valid-type]
TurnType = Literal[TURN_TYPES]  # type: ignore[valid-type]


class RoleAnswer(BaseModel):
    role: Role


class CaseStarts(BaseModel):
    case_starts: list[int] = Field(max_length=50)


class CaptionAnswer(BaseModel):
    readable: bool
    clinical: bool
    caption: str = Field(max_length=240)


class SummaryAnswer(BaseModel):
    summary: str = Field(max_length=3000)


class QuestionAnswer(BaseModel):
    keep: bool
    type: TurnType
    question: str = Field(max_length=600)
    answer: str = Field(max_length=2000)


class ConclusionAnswer(BaseModel):
    conclusion: str = Field(max_length=1500)


class DeletionAnswer(BaseModel):
    text: str = Field(max_length=3000)


class SentenceCuts(BaseModel):
    """A small model's de-leak: the numbers of the sentences to delete (a deletion by construction)."""

    delete: list[int] = Field(max_length=40)


class QuestionKeep(BaseModel):
    """A small model's question verdict: keep or drop only."""

    verdict: Literal["keep", "drop"]


class QuestionVerdict(BaseModel):
    verdict: Literal["keep", "trim", "paraphrase", "drop"]
    text: str = Field(max_length=600)


ROLE_CUES = {
    "Moderator": "chairs the meeting, presents patients, calls on others",
    "Pathologist": "biopsies, tissue and cytology findings",
    "Radiologist": "scans: CT, MRI, PET, ultrasound",
    "Medical Oncologist": "chemotherapy, targeted therapy, immunotherapy",
    "Radiation Oncologist": "radiotherapy doses and fields",
    "Surgeon": "operations and resectability",
    "Molecular Pathologist": "genomic and molecular test results",
    "Genetic Counselor": "inherited risk and germline testing",
    "Clinical Trial Specialist": "open trials and who qualifies",
    "Nurse Navigator": "coordination, scheduling, patient support",
    "Other": "anyone else",
}

ROLES_SYSTEM = ("You are given everything one voice said in a recorded tumor board meeting. Name the role that voice holds. "
                "Roles: " + "; ".join(f"{r} ({c})" for r, c in ROLE_CUES.items()) + ". Reply in JSON.")

SEGMENT_SYSTEM = ("You split a tumor board transcript into the patient cases it discusses. Lines are numbered. Reply in JSON "
                  "with case_starts: the number of the line where each new patient's case begins, in order. Lines before "
                  "the first case (greetings, housekeeping) belong to no case.")

CAPTION_SYSTEM = ("You look at one slide shown at a tumor board (its image, or the text read from it, which may have "
                  "reading errors). Say whether it is readable, whether it shows clinical content about the patient (not a "
                  "title page, agenda, logo or blank), and caption it in one line naming what it shows, in the slide's own "
                  "words. Reply in JSON.")

SUMMARY_SYSTEM = ("Write the case summary a tumor board is handed before it discusses a patient: history, findings, test "
                  "results and earlier treatment, in formal past-tense prose of at most six sentences. Use only facts stated "
                  "in the transcript or on the slides. Leave out the meeting, the speakers, and any recommendation or "
                  "decision made in it. Reply in JSON.")

QUESTION_SYSTEM = ("A specialist spoke at a tumor board. From the turn before theirs and their own turn, write the question "
                   "they were answering, in the third person and self-contained (name the finding or plan, never 'this'), "
                   "and their answer in their own words, trimmed only of words that answer nothing. Give its type: "
                   + ", ".join(TURN_TYPES) + ". Set keep to false when the turn answers nothing specific to this patient "
                   "(greetings, logistics, general knowledge). Reply in JSON.")

CONCLUSION_SYSTEM = ("State the board's conclusion for this patient in two to four impersonal sentences: the treatment, surgery, "
                     "next steps and trials it agreed on, and nothing the board did not say. Reply in JSON.")

DELEAK_SYSTEM = ("The board's decision is given. Cut from the text every statement that could not have been known when the "
                 "board decided: the result of the plan it chose (pathology from the operation it authorised, response to the "
                 "therapy it started), later scans, outcomes, survival, or the chosen plan reported as already begun. Keep "
                 "everything known before: history, earlier treatments and their results, pending tests. Only delete: return "
                 "the text with those statements cut out and no other word changed. Reply in JSON.")

QUESTION_DELEAK_SYSTEM = ("The board's decision and the case as it stood before the decision are given, with one question "
                          "asked at the meeting. verdict: keep (it states nothing learned after the decision), trim (cut a "
                          "clause that states such a fact; text is the question with it deleted), paraphrase (text restates it "
                          "using only words from the case or the question), or drop (it asks about something observed only "
                          "after the decision). Reply in JSON.")

DELEAK_SENTENCES_SYSTEM = ("The board's decision is given, and a text in numbered sentences. List the numbers of the sentences that "
                           "state something learned only after the decision: the result of the chosen plan, later scans, outcomes, "
                           "or the chosen plan reported as already begun. List none if every sentence was known before. Reply in JSON.")
