# Copyright 2026 memwarden contributors. MIT License.
"""The promotion score log: one JSON line per scoring, kept apart from the blocks.

Each line says when, which block, which scorer, the total, the full breakdown and the
verdict, so a promotion can be explained months later. The file rotates by size like
``logging.handlers.RotatingFileHandler``: ``scores.jsonl`` -> ``scores.jsonl.1`` ->
... -> ``scores.jsonl.<backups>``, the oldest dropped.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from memwarden._files import open_private, tighten_file, write_private
from memwarden.memory._clock import from_ts

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from types import TracebackType
    from typing import IO

    from memwarden.memory.policy._promotion import ScoreResult

__all__ = ["ScoreLog", "read"]

DEFAULT_MAX_BYTES = 10 * 1024 * 1024


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: write those as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


class ScoreLog:
    """Appends score records to a JSONL file, rotating it by size.

    Safe for several threads of one process (a lock serialises writes); one process
    should own the file. Use as a context manager or call :meth:`close`.
    """

    def __init__(
        self, path: str | Path, *, max_bytes: int = DEFAULT_MAX_BYTES, backups: int = 3
    ) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be at least 1, got {max_bytes}")
        if backups < 0:
            raise ValueError(f"backups must be 0 or more, got {backups}")
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.backups = backups
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        self._size = 0
        for i in range(backups + 1):  # an older version's (or a umask's) 0644 files: 0600
            with contextlib.suppress(PermissionError):
                tighten_file(self.path.with_name(f"{self.path.name}.{i}") if i else self.path)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def append(self, result: ScoreResult, *, at: float, event: str = "score", **extra: Any) -> None:
        """Write one scoring. ``at`` is POSIX seconds; ``event`` tags the line (score,
        consolidation, core_promotion, ...); ``extra`` adds fields (e.g. ``verdict``)."""
        record: dict[str, Any] = {"at": from_ts(at).isoformat(), "event": event}
        record.update(result.as_dict())
        record.update(extra)
        self.write(record)

    def write(self, record: dict[str, Any]) -> None:
        """Write one JSON object as a line (non-finite floats become null)."""
        line = json.dumps(_finite(record), separators=(",", ":"), ensure_ascii=False) + "\n"
        data_len = len(line.encode("utf-8"))
        with self._lock:
            handle = self._open()
            if self._size > 0 and self._size + data_len > self.max_bytes:
                self._rotate()
                handle = self._open()
            handle.write(line)
            handle.flush()
            self._size += data_len

    def drop_blocks(self, block_ids: Iterable[str]) -> int:
        """Rewrite the log (and its rotated files) without the lines about these blocks
        (erasure); returns how many lines went. Each file is replaced whole (written
        beside it, then renamed over it), so a crash leaves the old file or the new one.
        """
        gone = set(block_ids)
        if not gone:
            return 0
        return self._rewrite(lambda record: record.get("block_id") in gone)

    def drop_before(self, cutoff: float) -> int:
        """Rewrite the log (and its rotated files) without the lines written before
        ``cutoff`` (POSIX seconds; retention); returns how many went."""
        return self._rewrite(lambda record: _written_before(record, cutoff))

    def _rewrite(self, drop: Callable[[Any], bool]) -> int:
        dropped = 0
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
            for i in range(self.backups + 1):
                path = self.path.with_name(f"{self.path.name}.{i}") if i else self.path
                dropped += _drop_lines(path, drop)
        return dropped

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def _open(self) -> IO[str]:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = open_private(self.path, os.O_WRONLY | os.O_APPEND)  # 0600, whatever the umask
            self._file = os.fdopen(fd, "a", encoding="utf-8")
            self._size = self.path.stat().st_size
        return self._file

    def _rotate(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self.backups == 0:
            self.path.unlink(missing_ok=True)
            return
        for i in range(self.backups - 1, 0, -1):
            src = self.path.with_name(f"{self.path.name}.{i}")
            if src.exists():
                src.replace(self.path.with_name(f"{self.path.name}.{i + 1}"))
        self.path.replace(self.path.with_name(f"{self.path.name}.1"))


def _written_before(record: dict[str, Any], cutoff: float) -> bool:
    try:
        return datetime.fromisoformat(str(record["at"])).timestamp() < cutoff
    except (KeyError, ValueError):
        return False


def _drop_lines(path: Path, drop: Callable[[dict[str, Any]], bool]) -> int:
    """Rewrite ``path`` without the JSON-object lines ``drop`` says go (other lines are
    kept as they were); returns how many went."""
    try:
        lines = path.read_bytes().splitlines(keepends=True)
    except FileNotFoundError:
        return 0
    keep: list[bytes] = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            keep.append(line)
            continue
        if isinstance(record, dict) and drop(record):
            continue
        keep.append(line)
    dropped = len(lines) - len(keep)
    if dropped:
        write_private(path, b"".join(keep))
    return dropped


def read(path: str | Path, *, include_backups: bool = False) -> list[dict[str, Any]]:
    """The records in a score log, oldest first (with the rotated files, if asked)."""
    base = Path(path)
    files: list[Path] = []
    if include_backups:
        backups = sorted(
            (p for p in base.parent.glob(f"{base.name}.*") if p.suffix[1:].isdigit()),
            key=lambda p: int(p.suffix[1:]),
            reverse=True,
        )
        files.extend(backups)
    if base.exists():
        files.append(base)
    records: list[dict[str, Any]] = []
    for file in files:
        with file.open(encoding="utf-8") as handle:
            records.extend(json.loads(line) for line in handle if line.strip())
    return records
