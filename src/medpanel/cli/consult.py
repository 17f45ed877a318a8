"""Commands for consult (filled in by its module owner)."""

from __future__ import annotations
