"""Chat messages with optional slide images, independent of any provider's wire format."""

from __future__ import annotations

import base64
import hashlib
import mimetypes
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from medpanel.errors import UsageError


class Image(BaseModel):
    """An image shown to the model: a local file or a URL (http or data:), with its one-line caption."""

    path: str | None = None
    url: str | None = None
    caption: str = ""

    def data_url(self) -> str:
        if self.url:
            return self.url
        if not self.path:
            raise UsageError("An image has neither a path nor a URL.", "Give each slide an image file or a URL.")
        file = Path(self.path)
        try:
            raw = file.read_bytes()
        except OSError as exc:
            raise UsageError(f"Cannot read image {file}: {exc.strerror}.", "Check the slide's path (relative to the case file).") from None
        mime = mimetypes.guess_type(file.name)[0] or "image/png"
        return f"data:{mime};base64,{base64.b64encode(raw).decode()}"

    def fingerprint(self) -> str:
        """A short stable identity for cache keys: the file's content hash, not its path."""
        if self.path:
            try:
                return hashlib.sha256(Path(self.path).read_bytes()).hexdigest()[:16] + "|" + self.caption
            except OSError:
                return "missing:" + self.path + "|" + self.caption
        return hashlib.sha256((self.url or "").encode()).hexdigest()[:16] + "|" + self.caption


class Message(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str
    images: list[Image] = Field(default_factory=list)
    # Optional: where each image sits in `content` (character offsets, one per image, ascending), for
    # prompts that place every slide beside its own caption; None: the images follow the text.
    image_at: list[int] | None = None

    def text_with_captions(self) -> str:
        """The content with image captions written in, for models that cannot see images."""
        if not self.images:
            return self.content
        lines = [f"[Image {i}: {img.caption or 'no caption'}]" for i, img in enumerate(self.images, 1)]
        return self.content + "\n\n" + "\n".join(lines)


def normalise_messages(messages: Any) -> list[Message]:
    """Accept a string, dicts or Message objects; return Messages or raise a clear error."""
    if isinstance(messages, str):
        return [Message(role="user", content=messages)]
    if not isinstance(messages, (list, tuple)) or not messages:
        raise UsageError("Messages must be a non-empty list.", "Pass [{'role': 'user', 'content': '...'}] or a plain string.")
    out = []
    for m in messages:
        if isinstance(m, Message):
            out.append(m)
        elif isinstance(m, dict):
            try:
                out.append(Message.model_validate(m))
            except Exception as exc:
                raise UsageError(f"Invalid message {m!r}: {exc}", "Each message needs role (system/user/assistant) and content.") from None
        else:
            raise UsageError(f"Invalid message of type {type(m).__name__}.", "Use dicts or medpanel.models.Message.")
    return out
