"""Commands for report (filled in by its module owner)."""

from __future__ import annotations
