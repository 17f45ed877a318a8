"""Text from a model or a case, made safe to show: literal, with control characters visible.

Anything printed that came from a model or a case is printed literally (never as Rich markup or
emoji codes) and never sends a control character to the terminal: ESC, NUL, BEL, backspace, a bare
carriage return and the C1 controls (which some terminals obey like ESC) are replaced by visible
stand-ins. Newlines and tabs are kept. `visible` is the one place this is decided.
"""

from __future__ import annotations

import re

# C0 controls other than tab and newline, DEL, the C1 range, and lone surrogates (a terminal cannot encode them).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _show(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)  # ␀ ␁ ... ␛ ... ␟ (Unicode control pictures)
    if code == 0x7F:
        return "\u2421"  # ␡
    if code > 0xFF:
        return f"\\u{code:04x}"  # a lone surrogate: shown as its escape
    return f"\\x{code:02x}"  # C1: no control picture exists; show the escape as text


def visible(text: object) -> str:
    """`text` as a string with every control character but newline and tab made visible.

    A CRLF line ending counts as a newline. Idempotent: visible(visible(s)) == visible(s)."""
    s = text if isinstance(text, str) else str(text)
    if "\r\n" in s:
        s = s.replace("\r\n", "\n")
    return _CONTROL.sub(_show, s)


def has_controls(text: str) -> bool:
    """Whether `text` holds a character `visible` would replace (CRLF aside)."""
    return bool(_CONTROL.search(text.replace("\r\n", "\n")))
