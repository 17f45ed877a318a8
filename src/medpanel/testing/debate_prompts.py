"""What a scripted debater (a test's or a benchmark's) reads from the debate's prompts.

The debate states each peer's choice in that peer's header (protocols/debate.py PEER_HEADER) so a
person reading the prompt sees it at once; a fake seat that answers according to its peers finds the
letters with PEER_CHOICE. It is built from the header itself, so the two cannot drift apart, and it
lives here because no production code reads its own prompts back.
"""

from __future__ import annotations

import re

from medpanel.protocols.debate import PEER_HEADER

# The header up to the choice, with the label and round as patterns, then the choice's letter.
_BEFORE_CHOICE = re.escape(PEER_HEADER.split("{choice}")[0]).replace(r"\{label\}", r"Panelist \d+").replace(r"\{round\}", r"\d+")
PEER_CHOICE = re.compile("^" + _BEFORE_CHOICE + r"([A-J])\b", re.MULTILINE)


def peer_choices(prompt: str) -> list[str]:
    """The letters the peers chose, in the order the prompt shows them (a peer with no clear choice gives none)."""
    return PEER_CHOICE.findall(prompt)


__all__ = ["PEER_CHOICE", "peer_choices"]
