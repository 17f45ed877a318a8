"""Commands for replay (filled in by its module owner)."""

from __future__ import annotations
