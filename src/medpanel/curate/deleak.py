"""The de-leaking validator: is a model's edit of a text a deletion from it, and nothing more?

Why: OpenTumorBoard de-leaks every case against its decision point (paper, Appendix F), and accepts an
edit to a summary, caption or question only as a deletion from the input, so that de-leaking can remove
post-decision facts but never add or alter one. A model does the de-leaking; this module is the
deterministic check on what it returns.

Normalisation, precisely. Both texts are NFKC-normalised and case-folded, typographic quotes and dashes
become ASCII, and each is cut into *words*: maximal runs of letters and digits, joined inside a word by
one of `- ' . / + %` between two letters or digits, with a trailing `%` kept (so "3+4", "9.4", "ng/mL",
"PI-RADS", "60%", "doesn't" are one word each). Everything else (whitespace, other punctuation, a trailing full stop) is not compared.
The edit is deletion-only when its word sequence is a subsequence of the source's.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from dataclasses import dataclass, field

_WORD = re.compile(r"[^\W_]+(?:[-'./+%][^\W_]+)*%?")
_CLAUSE_BREAK = re.compile(r"[,;:.!?()\n]")
_TYPOGRAPHY = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-", "\u2212": "-"})

# Connectives: the one kind of word an edit may change (at most `connective_changes` of them) to keep the
# prose grammatical after a cut. Negations are deliberately not connectives.
CONNECTIVES = frozenset("and or but yet so while whereas although though however then also with as which that".split())

# Function words: never "content". A new function word is still not a deletion, but it is not a new fact.
FUNCTION_WORDS = CONNECTIVES | frozenset(
    "a an the of in on at to for from by into onto over under about than this these those it its he she his her him "
    "they them their we our you your i me my is are was were be been being has have had do does did will would can "
    "could should may might must shall there here who whom whose what when where why how if".split())

# Negation cues (and any word ending in n't). A multi-word cue counts as removed when any of its words is.
# They are not function words either: a negation the source never had is a new content word.
NEGATIONS = ("no", "not", "without", "never", "none", "neither", "nor", "cannot", "denies", "denied", "deny", "negative for",
             "free of", "absence of", "absent", "ruled out", "rules out", "rule out", "unremarkable")


@dataclass(frozen=True)
class Word:
    """One word of a text: its normalised form, its character span (in the NFKC text), and its clause number."""

    norm: str
    start: int
    end: int
    clause: int


@dataclass
class Verdict:
    """The result of a check: `accepted`, the `reasons` it was refused (empty when accepted), the
    `removed` spans exactly as they stand in the source (a connective swapped for another is inside a
    removed span), the `new_words` the edit brought in, and the connective `substitutions` (source word ->
    edited word) it made, and the `negations` it cut from a statement that stays."""

    accepted: bool
    reasons: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    new_words: list[str] = field(default_factory=list)
    substitutions: list[tuple[str, str]] = field(default_factory=list)
    negations: list[str] = field(default_factory=list)


def _prepared(text: str) -> str:
    """NFKC with typographic quotes and dashes made ASCII: the text word spans index (case kept)."""
    return unicodedata.normalize("NFKC", text).translate(_TYPOGRAPHY)



def words(text: str) -> list[Word]:
    """The words of `text` (see the module docstring), each with its character span and clause number;
    a clause ends at , ; : . ! ? a bracket or a line break."""
    text = _prepared(text)  # spans index this text (NFKC may change lengths; case-folding is per word)
    out, clause, last = [], 0, 0
    for m in _WORD.finditer(text):
        clause += len(_CLAUSE_BREAK.findall(text, last, m.start()))
        out.append(Word(m.group().casefold().strip("'"), m.start(), m.end(), clause))
        last = m.end()
    return out


def is_subsequence(edited: list[str], source: list[str]) -> bool:
    it = iter(source)
    return all(any(w == s for s in it) for w in edited)


def new_content_words(edited: str, *sources: str) -> list[str]:
    """Content words of `edited` (in order, once each) found in none of `sources`: the check that no new
    fact came in, usable on its own for a paraphrased question against everything the model could see."""
    seen = {w.norm for s in sources for w in words(s)}
    out: list[str] = []
    for w in words(edited):
        if w.norm not in seen and w.norm not in FUNCTION_WORDS and w.norm not in out:
            out.append(w.norm)
    return out


def _negation_cues(src: list[Word]) -> list[list[int]]:
    """Index lists of every negation cue occurrence in the source words."""
    norms = [w.norm for w in src]
    cues = [[i] for i, w in enumerate(norms) if w.endswith("n't")]  # doesn't, isn't, can't, ...
    for cue in NEGATIONS:
        parts = cue.split()
        for i in range(len(norms) - len(parts) + 1):
            if norms[i:i + len(parts)] == parts:
                cues.append(list(range(i, i + len(parts))))
    return cues


# Words that end a negation's scope inside a clause ("no nodal disease and a PSA of 9"). "or" and "nor"
# do not: a negation distributes over them ("no nodal or distant disease").
SCOPE_BREAKS = CONNECTIVES - {"or", "that", "which", "as"}


def _scope(src: list[Word], cue: list[int]) -> range:
    """The words a negation cue governs: from after the cue to the end of its clause or the next
    scope-breaking connective, whichever comes first."""
    end = cue[-1] + 1
    while end < len(src) and src[end].clause == src[cue[0]].clause and src[end].norm not in SCOPE_BREAKS:
        end += 1
    return range(cue[-1] + 1, end)


def _flipped_negations(src: list[Word], kept: set[int]) -> list[str]:
    """Negation cues removed while a word in their scope was kept: the statement survives with its
    meaning reversed ("no nodal disease" -> "nodal disease"). A cue removed with all it governs is an
    ordinary deletion."""
    flipped = []
    for cue in _negation_cues(src):
        if all(i in kept for i in cue):
            continue
        if any(j in kept for j in _scope(src, cue)):
            flipped.append(" ".join(src[i].norm for i in cue))
    return flipped


def _spans(source: str, src: list[Word], removed: list[int]) -> list[str]:
    """Runs of consecutive removed word indices, as the verbatim stretch of the source they cover."""
    text = _prepared(source)
    runs: list[list[int]] = []
    for i in removed:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return [text[src[r[0]].start:src[r[-1]].end] for r in runs]


def check_deletion(source: str, edited: str, *, connective_changes: int = 1, guard_negations: bool = True) -> Verdict:
    """Accept `edited` only as `source` with some spans deleted (after the normalisation above), up to
    `connective_changes` connective words swapped for another connective, and no negation cut from a
    clause that otherwise stays. Reasons for a refusal: "new_content_word", "new_function_word",
    "reordered" (every word is from the source, but not in its order or more often than there),
    "connective_limit" and "negation_removed" (the cues are in `negations`)."""
    src, out = words(source), words(edited)
    a, b = [w.norm for w in src], [w.norm for w in out]
    verdict = Verdict(accepted=False)
    kept, extra, verdict.substitutions = _align(a, b)
    kept = _shift_left(a, kept)
    removed = [i for i in range(len(a)) if i not in kept]
    vocabulary = set(a)
    verdict.new_words = [w for w in dict.fromkeys(extra) if w not in vocabulary]
    if any(w not in FUNCTION_WORDS for w in verdict.new_words):
        verdict.reasons.append("new_content_word")
    elif verdict.new_words:
        verdict.reasons.append("new_function_word")
    if extra and not verdict.new_words:
        verdict.reasons.append("reordered")
    if len(verdict.substitutions) > connective_changes:
        verdict.reasons.append("connective_limit")
    if guard_negations and (flipped := _flipped_negations(src, kept)):
        verdict.reasons.append("negation_removed")
        verdict.negations = flipped
    verdict.removed = _spans(source, src, sorted(removed))
    verdict.accepted = not verdict.reasons
    return verdict


def _align(a: list[str], b: list[str]) -> tuple[set[int], list[str], list[tuple[str, str]]]:
    """Match the edited words `b` to the source words `a` in order: (source indices kept, edited words
    left unmatched, connective substitutions). A replaced stretch counts as a substitution when one
    connective takes the place of a stretch that holds a connective."""
    kept: set[int] = set()
    extra: list[str] = []
    swaps: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        replaced = [a[i] for i in range(i1, i2) if a[i] in CONNECTIVES]
        if op == "equal":
            kept.update(range(i1, i2))
        elif op == "replace" and j2 - j1 == 1 and b[j1] in CONNECTIVES and replaced:
            swaps.append((replaced[0], b[j1]))
        else:  # "delete" adds nothing; "insert" and any other "replace" bring words in
            extra.extend(b[j1:j2])
    if extra and is_subsequence(b, a):  # the matcher missed an embedding that exists: take the leftmost
        return _greedy(a, b), [], []
    return kept, extra, swaps


def _shift_left(a: list[str], kept: set[int]) -> set[int]:
    """One canonical embedding among equals: a removed run whose last word repeats the kept word just
    before it is slid one place left ("no cough and no fever" -> "no fever" removes "no cough and", not
    "cough and no"), until no run can slide. The edited text is the same; the negation check then reads
    each kept word as the source word it most plausibly is."""
    kept = set(kept)
    moved = True
    while moved:
        moved = False
        i = 0
        while i < len(a):
            if i in kept:
                i += 1
                continue
            k = i
            while k + 1 < len(a) and k + 1 not in kept:
                k += 1
            if i - 1 in kept and a[i - 1] == a[k]:
                kept.discard(i - 1)
                kept.add(k)
                moved = True
            i = k + 1
    return kept


def _greedy(a: list[str], b: list[str]) -> set[int]:
    """Source indices of the leftmost embedding of `b` in `a` (b is known to be a subsequence)."""
    kept, i = set(), 0
    for w in b:
        while a[i] != w:
            i += 1
        kept.add(i)
        i += 1
    return kept


def check_caption(original: str, trimmed: str) -> Verdict:
    """A trimmed slide caption must be a word subsequence of the original: no word changed at all."""
    return check_deletion(original, trimmed, connective_changes=0)
