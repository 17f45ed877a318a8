"""Commands for debate (filled in by its module owner)."""

from __future__ import annotations
