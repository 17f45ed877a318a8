"""Untrusted data in a judge's user text: every part the judge grades sits inside a tag the prompt
declares to be material, never instructions, and no look-alike of those tags survives inside the data,
so a candidate cannot close its own section early and speak to the judge from outside it."""

from __future__ import annotations

import re
import unicodedata

from medpanel.cases.model import Case
from medpanel.scoring.judges import prompts

UNTRUSTED_TAGS = ("TARGET_SPECIALIST_ROLE", "CASE_SUMMARY", "SLIDE_DESCRIPTIONS", "QUESTION", "REFERENCE_ANSWER",
                  "REFERENCE_CONCLUSION", "CANDIDATE_RESPONSE")
UNTRUSTED_NOTE = prompts.data_note(UNTRUSTED_TAGS)

# What a reader could take for a tag's angle brackets: the ASCII ones, everything NFKC folds to them
# (small and full-width forms) and the common look-alikes (single guillemets, angle brackets, modifier letters).
_OPENERS = "<\ufe64\uff1c\u2039\u2329\u3008\u27e8\u276e\u02c2\u1438\u29fc"
_CLOSERS = ">\ufe65\uff1e\u203a\u232a\u3009\u27e9\u276f\u02c3\u1433\u29fd"
_SLASHES = "/\uff0f\u2215\u2044\u29f8"
_COMPACT_TAGS = {re.sub(r"[\W_]", "", t.casefold()): t for t in UNTRUSTED_TAGS}
_TAG_WINDOW = 400  # characters looked at after an opening bracket (attributes, padding, invisible characters)


def _compact(text: str) -> str:
    """`text` as a reader sees it: NFKC, no format characters (zero-width space/joiners, BOM, soft hyphen,
    bidi controls) or combining marks, casefolded, slash look-alikes as '/', and nothing but letters,
    digits and slashes (so spaces, underscores, hyphens and their variants inside a name do not count)."""
    folded = unicodedata.normalize("NFKC", text)
    kept = []
    for c in folded:
        if unicodedata.category(c) in ("Cf", "Mn", "Me", "Cc"):
            continue
        kept.append("/" if c in _SLASHES else c)
    return re.sub(r"[^\w/]|_", "", "".join(kept).casefold())


def _look_alike(inner: str) -> tuple[str, str] | None:
    """(slash, TAG) when `inner` (what follows an opening bracket) reads as one of our tags, with any attributes."""
    compact = _compact(inner)
    slash = "/" if compact.startswith("/") else ""
    name = compact.lstrip("/")
    for short, tag in _COMPACT_TAGS.items():
        if name.startswith(short):
            return slash, tag
    return None


def neutralise_tags(text: str) -> str:
    """`text` with every look-alike of our data tags defanged to `[TAG]` / `[/TAG]`.

    Matching is done on a normalised reading of each bracketed span (see `_compact`), so variants
    with attributes, zero-width or format characters, full-width or small forms, odd case or spacing
    are caught; the replacement is made in the original text. An opening bracket that reads as our
    tag but is never closed loses its bracket (`[` instead), so it cannot pair with ours."""
    pieces: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c not in _OPENERS:
            pieces.append(c)
            i += 1
            continue
        end = i + 1
        limit = min(n, i + 1 + _TAG_WINDOW)
        while end < limit and text[end] not in _CLOSERS and text[end] not in _OPENERS:
            end += 1
        closed = end < n and end < limit and text[end] in _CLOSERS
        found = _look_alike(text[i + 1 : end])
        if found is None:
            pieces.append(c)
            i += 1
        elif closed:
            pieces.append(f"[{found[0]}{found[1]}]")
            i = end + 1
        else:
            pieces.append("[")
            i += 1
    return "".join(pieces)


def tagged(tag: str, text: str | None) -> str:
    """`text` wrapped in `tag`. Any of our tags written inside the text, in any look-alike form, is
    defanged, so a candidate cannot close its own section early and speak to the judge from outside it."""
    clean = neutralise_tags(text or "").strip()
    return f"<{tag}>\n{clean}\n</{tag}>"


def evidence_text(case: Case) -> str:
    return tagged("CASE_SUMMARY", case.summary or "No case summary is available.") + "\n\n" + tagged("SLIDE_DESCRIPTIONS", case.slide_text())
