"""What is wrong with the store file itself (full disk, read-only, corrupted, locked), said in one line.

Kept apart from the store so its every caller can tell a store problem (not an item's fault: the item is
left unrecorded and a resume runs it) from a bug, without reading the store's plumbing.
"""

from __future__ import annotations

from pathlib import Path

from medpanel.errors import UsageError


class StoreError(UsageError):
    """The store file itself is the problem (full disk, read-only, corrupted, missing folder): not an item's fault."""


_STORE_PROBLEMS = ("SQLITE_FULL", "SQLITE_READONLY", "SQLITE_NOTADB", "SQLITE_CORRUPT", "SQLITE_BUSY", "SQLITE_LOCKED",
                   "SQLITE_IOERR", "SQLITE_CANTOPEN", "SQLITE_PERM")


def is_store_problem(exc: BaseException) -> bool:
    """The file, disk or lock is at fault (not the SQL): say so to the user instead of a traceback."""
    return isinstance(exc, OSError) or str(getattr(exc, "sqlite_errorname", "") or "").startswith(_STORE_PROBLEMS)


def store_error(exc: BaseException, path: Path) -> StoreError:
    """One line saying what is wrong with the store file and what to do, from an sqlite3/OS error."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc)
    resume = "Items already finished are saved; continue with `medpanel bench --resume RUN`."
    if name.startswith("SQLITE_FULL") or "disk is full" in text or getattr(exc, "errno", None) == 28:
        return StoreError(f"The disk holding the store {path} is full ({text}).", f"Free space on it, then retry. {resume}")
    if name.startswith("SQLITE_READONLY") or "readonly" in text or isinstance(exc, PermissionError):
        return StoreError(f"The store {path} is read-only ({text}).",
                          "Make the file and its folder writable (chmod u+w), or pass another path with --store or MEDPANEL_STORE.")
    if name.startswith(("SQLITE_NOTADB", "SQLITE_CORRUPT")) or "not a database" in text or "malformed" in text:
        return StoreError(f"The store {path} is not a readable SQLite database: it is corrupted or another kind of file ({text}).",
                          "Pass another path with --store; keep the file: `sqlite3 FILE .recover` may save its runs.")
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text:
        return StoreError(f"The store {path} stayed locked by another process for 30 s ({text}).",
                          "Wait for the other medpanel command to finish, or use another --store.")
    if name.startswith("SQLITE_IOERR") or "I/O error" in text:
        return StoreError(f"Reading or writing the store {path} failed: disk I/O error ({text}).",
                          f"Check the disk (and free space), then retry. {resume}")
    return StoreError(f"Cannot open the store {path}: {text}.", "Pass a writable path with --store or MEDPANEL_STORE.")
