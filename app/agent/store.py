"""Appointments in SQLite: one table, one row per booking, local wall-clock times of the business."""
import sqlite3
import threading
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS appointments (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,            -- the caller's name as given
    service TEXT NOT NULL,         -- canonical service name of the profile
    start TEXT NOT NULL,           -- local start, ISO 'YYYY-MM-DDTHH:MM'
    duration_min INTEGER NOT NULL,
    created_at TEXT NOT NULL DEFAULT (datetime('now'))
);
CREATE INDEX IF NOT EXISTS appointments_start ON appointments(start);
"""


@dataclass(frozen=True)
class Appointment:
    id: int
    name: str
    service: str
    start: datetime               # naive local time of the business
    duration_min: int

    @property
    def end(self) -> datetime:
        return self.start + timedelta(minutes=self.duration_min)


class Store:
    """Thread-safe access to the appointments table (sessions call tools from executor threads)."""

    def __init__(self, conn: sqlite3.Connection):
        self._conn = conn
        self._lock = threading.Lock()
        with self._lock:
            self._conn.executescript(_SCHEMA)

    def _rows(self, sql: str, args=()) -> list[Appointment]:
        with self._lock:
            rows = self._conn.execute(sql, args).fetchall()
        return [Appointment(r[0], r[1], r[2], datetime.fromisoformat(r[3]), r[4]) for r in rows]

    def on_date(self, date) -> list[Appointment]:
        """The appointments starting on `date`, by start time."""
        sql = "SELECT id, name, service, start, duration_min FROM appointments WHERE start LIKE ? ORDER BY start"
        return self._rows(sql, (f"{date.isoformat()}T%",))

    def all(self) -> list[Appointment]:
        """Every appointment, by start time."""
        return self._rows("SELECT id, name, service, start, duration_min FROM appointments ORDER BY start")

    def upcoming(self, since: datetime) -> list[Appointment]:
        """The appointments that start at `since` or later, by start time (a start is a whole minute)."""
        first = since.replace(second=0, microsecond=0)
        first += timedelta(minutes=1) if first < since else timedelta(0)
        sql = "SELECT id, name, service, start, duration_min FROM appointments WHERE start >= ? ORDER BY start"
        return self._rows(sql, (first.strftime("%Y-%m-%dT%H:%M"),))

    def for_name(self, name: str, since: datetime | None = None) -> list[Appointment]:
        """The appointments booked under `name` (any case), from `since` on, by start time."""
        sql = ("SELECT id, name, service, start, duration_min FROM appointments "
               "WHERE lower(name) = lower(?) AND start >= ? ORDER BY start")
        return self._rows(sql, (name.strip(), (since or datetime.min).strftime("%Y-%m-%dT%H:%M")))

    @contextmanager
    def _writing(self):
        """One write transaction, begun IMMEDIATE: it holds the file's write lock from its first read, so a check
        and the write it decides run as one against every other connection (another `parley serve` on the same
        file), not only against this process's threads."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def add(self, name: str, service: str, start: datetime, duration_min: int) -> Appointment:
        """Insert a booking unless it overlaps another; returns it. Raises ValueError on overlap."""
        with self._writing():
            self._check_free(start, duration_min)
            cur = self._conn.execute(
                "INSERT INTO appointments (name, service, start, duration_min) VALUES (?, ?, ?, ?)",
                (name.strip(), service, start.strftime("%Y-%m-%dT%H:%M"), duration_min))
        return Appointment(cur.lastrowid, name.strip(), service, start, duration_min)

    def move(self, appointment: Appointment, start: datetime) -> Appointment:
        """Give a booking another start unless it would overlap another booking (its own old time aside); returns
        it. Raises ValueError on overlap."""
        with self._writing():
            self._check_free(start, appointment.duration_min, appointment.id)
            self._conn.execute("UPDATE appointments SET start = ? WHERE id = ?",
                               (start.strftime("%Y-%m-%dT%H:%M"), appointment.id))
        return replace(appointment, start=start)

    def check_free(self, start: datetime, duration_min: int, moving: int | None = None) -> None:
        """Raises ValueError if a booking there would overlap another (add's check, outside a write); `moving`: the
        id of a booking that would leave its place for it."""
        with self._lock:
            self._check_free(start, duration_min, moving)

    def _check_free(self, start: datetime, duration_min: int, moving: int | None = None) -> None:
        day = self._conn.execute("SELECT id, start, duration_min FROM appointments WHERE start LIKE ?",
                                 (f"{start.date().isoformat()}T%",)).fetchall()
        end = start + timedelta(minutes=duration_min)
        for other_id, other_start, other_min in day:
            s = datetime.fromisoformat(other_start)
            if other_id != moving and s < end and start < s + timedelta(minutes=other_min):
                raise ValueError("overlaps an existing appointment")

    def remove(self, appointment_id: int) -> None:
        with self._writing():
            self._conn.execute("DELETE FROM appointments WHERE id = ?", (appointment_id,))

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class UnwrittenStore:
    """A Store for previews (app.agent.tools.Toolbox.preview): reads go to the store, a booking or a move is checked
    as `add` and `move` check it but not made, and a removal is not made."""

    def __init__(self, store: Store):
        self._store = store
        self.on_date, self.all, self.upcoming, self.for_name = store.on_date, store.all, store.upcoming, store.for_name

    def add(self, name: str, service: str, start: datetime, duration_min: int) -> Appointment:
        self._store.check_free(start, duration_min)
        return Appointment(0, name.strip(), service, start, duration_min)

    def move(self, appointment: Appointment, start: datetime) -> Appointment:
        self._store.check_free(start, appointment.duration_min, appointment.id)
        return replace(appointment, start=start)

    def remove(self, appointment_id: int) -> None:
        pass


def open_store(path: str) -> Store:
    """The store in the SQLite file at `path` (":memory:" for a private one); creates parent dir and schema."""
    if path != ":memory:":
        Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        path = str(Path(path).expanduser())
    # isolation_level=None: transactions are the store's own (`_writing`), not sqlite3's implicit ones, which
    # begin only at the INSERT, after the overlap check read the day
    return Store(sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=10))
