"""What `medpanel serve` was started with: plain data, read by every route."""

from __future__ import annotations

import ipaddress
import secrets
from dataclasses import dataclass, field
from pathlib import Path

MAX_UPLOAD_BYTES = 8 * 1024 * 1024  # one slide image
MAX_REQUEST_BYTES = 64 * 1024 * 1024  # one request: a case and all its slides
TIMEOUT_ACTIONS = ("stop", "pass")  # what happens when a person in a seat does not answer in time


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class WebConfig:
    store_path: Path | None = None  # None: the default store (MEDPANEL_STORE or ~/.medpanel/medpanel.db)
    host: str = "127.0.0.1"
    token: str | None = None  # the admin access token; required (made if not given) off loopback
    cases_dir: Path | None = None  # the case folders offered on the start page (default ./examples when it exists)
    uploads_dir: Path | None = None  # where uploaded cases are kept, one folder each (default beside the store)
    default_model: str = "local"
    seat_timeout_s: float = 600.0  # how long a deliberation waits for a person in a seat
    on_timeout: str = "stop"  # stop: the deliberation stops (resumable); pass: the seat passes its turn
    max_upload_bytes: int = MAX_UPLOAD_BYTES  # one slide image
    max_request_bytes: int = MAX_REQUEST_BYTES  # one request in all (a case and its slides)
    # The model specs the start form may use (the default model is always one). Only these: a spec can name a
    # server (which gets the API key), a key variable or a file, so a page never chooses one freely.
    allowed_models: tuple[str, ...] = ()
    max_live: int = 4  # deliberations running at once; more are refused with a clear message
    timeout_s: float = 300.0  # one model call
    start_board: Path | None = None  # a case folder: a live board on default_model opens when the server starts
    extra: dict = field(default_factory=dict)

    @property
    def upload_folder(self) -> Path:
        """Where uploaded cases are kept: `uploads_dir`, else `uploads/` beside the store."""
        if self.uploads_dir is not None:
            return Path(self.uploads_dir)
        from medpanel.runs.store import default_store_path

        return Path(self.store_path or default_store_path()).parent / "uploads"

    @property
    def models(self) -> list[str]:
        """The specs the start form offers: the default model, then the allowed ones."""
        return list(dict.fromkeys([self.default_model, *self.allowed_models]))

    @property
    def needs_token(self) -> bool:
        """Off loopback every route but the health check needs a token; on loopback only when one was set."""
        return not is_loopback(self.host) or self.token is not None

    def with_token(self) -> "WebConfig":
        """This config, with a fresh random admin token when it needs one and has none."""
        if not is_loopback(self.host) and self.token is None:
            self.token = secrets.token_urlsafe(24)
        return self
