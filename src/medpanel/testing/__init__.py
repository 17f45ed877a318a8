"""Test helpers that ship with the package: a mock OpenAI-compatible server over real HTTP.

Names are loaded lazily so `python -m medpanel.testing.mock_server` does not import the module twice.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FAULT_KINDS", "MockConfig", "MockServer", "fake_from_schema"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from medpanel.testing import mock_server

        return getattr(mock_server, name)
    raise AttributeError(f"module 'medpanel.testing' has no attribute {name!r}")
