"""Commands for scoring (filled in by its module owner)."""

from __future__ import annotations
