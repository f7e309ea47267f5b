"""Cache counters, kept next to the cache in a small SQLite file and updated
with one transaction per compile, so concurrent processes add up exactly
and a process killed mid-update leaves either all of its counts or none.

Names: kernel.hit, kernel.miss, kernel.bypass, kernel.bypass.<reason>,
region.hit, region.miss, region.bypass, region.bypass.<reason>,
corrupt, evictions, stores, store_errors, saved_s, compiles; per tier:
local.hit, local.miss, remote.hit, remote.miss, remote.refused,
remote.corrupt, remote.errors, remote.stores, remote.backfills.
"""
from __future__ import annotations

import os
import sqlite3
import threading
import time

FILENAME = "nkicc-stats.sqlite3"


class Counters:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, FILENAME)
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()  # one connection, shared by the process's threads

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value REAL NOT NULL)")
            self._conn = conn
        return self._conn

    def add(self, deltas: dict[str, float]) -> None:
        deltas = {k: v for k, v in deltas.items() if v}
        if not deltas:
            return
        with self._lock:
            self._add(deltas)

    def _add(self, deltas: dict[str, float]) -> None:
        db = self._db()
        for attempt in range(5):
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    db.executemany(
                        "INSERT INTO counters (name, value) VALUES (?, ?) "
                        "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
                        sorted(deltas.items()))
                    db.execute("COMMIT")
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                time.sleep(0.05 * (attempt + 1))
        raise sqlite3.OperationalError("stats database stayed locked")

    def read(self) -> dict[str, float]:
        if self._conn is None and not os.path.exists(self.path):
            return {}
        with self._lock:
            rows = self._db().execute("SELECT name, value FROM counters").fetchall()
        return {name: (int(v) if float(v).is_integer() and name != "saved_s" else v) for name, v in rows}

    def reset(self) -> None:
        if self._conn is None and not os.path.exists(self.path):
            return
        with self._lock:
            self._db().execute("DELETE FROM counters")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
