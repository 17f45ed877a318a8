"""MedSyn's ICD-10 scoring as released (src/evaluation of burcusayin/MedSyn), bugs included: preset "released".

It exists so that a user can put medpanel's numbers next to the paper's. The corrected default in
`medpanel.scoring.icd10` does none of the following; each is a behaviour of the released code:

* Gold codes (MIMIC stores them without dots) get a dot after the third character always, so a
  three-character gold code reads "I10." and never matches at full-code level.
* The model's codes are read from the printed discharge (`codes='...'`) without normalising: no
  upper-casing; every "and" and comma is deleted first, so "A,B" becomes one token "AB".
  - Text without any dot is split on whitespace and every token is a code as written ("e119",
    "[I10"); its "category" is the token itself, not cut. Nothing at all becomes the placeholder
    "Not assigned", which falls in the chapter of the letter N.
  - Text with a dot is searched for a letter, 2-3 digits, optionally a dot and 1-3 digits, and
    optionally one letter, between word boundaries. Codes with a letter in third place (Z3A, D3A,
    C7A, M1A, O9A, QA0) are not found; a longer code is cut where the pattern stops (T84.50XA is
    T84). If nothing is found, the whole text is one "code".
* The category is the text before the dot. The "chapter" of a category is looked up by its first
  letter (an invented category gets its letter's chapter); a category starting with D is its own
  chapter (D50 and D64 never match), except D3A (neoplasms); one starting with H is eye (H00-H59) or
  ear by the number after the letter; anything else (lower case, brackets) has no chapter (None,
  which does match another None).
* Per sample precision |P∩G|/|P|, recall |P∩G|/|G|, F1 and Jaccard |P∩G|/|P∪G|, 0 where undefined;
  the paper's tables print the mean over samples rounded to three decimals.

Where the released code itself would stop with an error (an H category whose rest is not a
number, "H12A"), the pair raises `ReleasedCrash`: the caller records it as failed, never as a score.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from medpanel.errors import UsageError
from medpanel.scoring.icd10 import LEVELS

PLACEHOLDER = "Not assigned"  # what the release predicts when the codes field holds nothing
# The released reader: a letter, two or three digits, an optional dot with one to three digits, an
# optional letter, at word boundaries (Python's Unicode \b, as the release ran it).
_RELEASED_CODE = re.compile(r"\b[A-Z][0-9]{2,3}(?:\.[0-9]{1,3})?[A-Z]?\b")
_GOLD_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9.]*")

# Chapter by first letter, as the release assigns it (D and H are decided by `chapter` below).
_LETTER_CHAPTER = {**dict.fromkeys("AB", "chapter 1"), "C": "chapter 2", "E": "chapter 4", "F": "chapter 5", "G": "chapter 6",
                   "I": "chapter 9", "J": "chapter 10", "K": "chapter 11", "L": "chapter 12", "M": "chapter 13",
                   "N": "chapter 14", "O": "chapter 15", "P": "chapter 16", "Q": "chapter 17", "R": "chapter 18",
                   **dict.fromkeys("ST", "chapter 19"), "U": "chapter 22", **dict.fromkeys("VWXY", "chapter 20"), "Z": "chapter 21"}


class ReleasedCrash(Exception):
    """The released scoring would have stopped with an error on this input."""


def printed_codes(pred: str | Iterable[str]) -> str:
    """The codes text the release parsed: the field as Python prints it (repr), quotes removed.

    The release wrote `str(DischargeText)` (`diagnosis='...' codes='...'`) and kept what follows
    "codes=", deleting every single quote and stripping spaces and double quotes. A list of codes
    is joined with ", " (the released schema had one string field).
    """
    text = pred if isinstance(pred, str) else ", ".join(str(p) for p in pred)
    printed = repr(text).split("codes=")[0]  # text after the field's "codes=", up to any second one
    return printed.replace("'", "").strip(" ").strip('"')


def predicted_sets(pred: str | Iterable[str]) -> tuple[set[str], set[str]]:
    """(codes, categories) the release read from a prediction."""
    whole = printed_codes(pred)
    text = whole.replace("and", "").replace(",", "")
    if "." not in text:  # read token by token, as written, and never cut to a category
        tokens = set(text.split()) or {PLACEHOLDER}
        return tokens, set(tokens)
    found = set(_RELEASED_CODE.findall(text))
    if not found:
        return {whole}, {whole}
    return found, {code.split(".")[0] for code in found}


def gold_sets(gold: str | Iterable[str]) -> tuple[set[str], set[str]]:
    """(codes, categories) of gold codes as the release stored them: a dot after the third character, always."""
    items = re.split(r"[\s,;]+", gold) if isinstance(gold, str) else [str(g) for g in gold]
    tokens = [t.strip() for t in items if t and t.strip()]
    bad = [t for t in tokens if not _GOLD_TOKEN.fullmatch(t)]
    if bad or not tokens:
        raise UsageError(f"Gold codes {bad or tokens!r} are not MIMIC-style codes.",
                         "Give gold codes as a letter then letters, digits and dots (E11.9, I10, E785), as MIMIC-IV stores them.")
    dotted = set()
    for token in tokens:
        bare = token.replace(".", "")
        dotted.add(f"{bare[:3]}.{bare[3:]}")
    return dotted, {code.split(".")[0] for code in dotted}


def chapter(category: str) -> str | None:
    """The release's "chapter" of a category (see the module docstring)."""
    if category[0] in _LETTER_CHAPTER:
        return _LETTER_CHAPTER[category[0]]
    if "D" in category:
        return "chapter 2" if "3A" in category else category
    if "H" in category:
        try:
            number = int(category[1:])
        except ValueError:
            raise ReleasedCrash(f"the released chapter lookup fails on '{category}' (no number after its first character)") from None
        return "chapter 7" if number < 60 else "chapter 8"
    return None


def released_metrics(predicted: set, gold: set) -> dict[str, float]:
    hits = len(predicted & gold)
    union = len(predicted | gold)
    precision = hits / len(predicted) if predicted else 0.0
    recall = hits / len(gold) if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "jaccard": hits / union if union else 0.0}


def released_scores(pred: str | Iterable[str], gold: str | Iterable[str]) -> dict:
    """One pair's `{level}_{metric}` scores as the release computed them, and the sets it compared.

    Raises ReleasedCrash where the release would have raised; UsageError for gold it could not hold.
    """
    gold_codes, gold_categories = gold_sets(gold)
    pred_codes, pred_categories = predicted_sets(pred)
    sets = {"code": (pred_codes, gold_codes), "category": (pred_categories, gold_categories),
            "chapter": ({chapter(c) for c in pred_categories}, {chapter(c) for c in gold_categories})}
    scores: dict = {}
    for level in LEVELS:
        for metric, value in released_metrics(*sets[level]).items():
            scores[f"{level}_{metric}"] = value
    scores["n_predicted"] = float(len(pred_codes))
    scores["n_gold"] = float(len(gold_codes))
    scores["read_as"] = {level: {"predicted": _listed(p), "gold": _listed(g)} for level, (p, g) in sets.items()}
    return scores


def _listed(values: set) -> list:
    return sorted(values, key=lambda v: (v is None, v or ""))
