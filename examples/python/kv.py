#!/usr/bin/env python3
"""The key-value service of examples/kv, in Python, beside a leasehold-executor sidecar.

    python3 examples/python/kv.py --sidecar http://127.0.0.1:7201 \\
        --listen 127.0.0.1:7301 --store-dir /tmp/kv

`leasehold-executor --local-listen 127.0.0.1:7201 ...` runs beside it: the sidecar registers with
the managers, holds the lease and the shards, and tells this process what it may admit through its
local API (docs/PROTOCOL.md, section 16). This process serves `PUT`/`GET /kv/{key}` and
`GET /stats` with the same bodies, statuses and SQLite shard files as the Rust example, and fences
every write by its shard's epoch (docs/FENCING.md).

Standard library only, Python 3.11+. Three parts:

1. Leasehold: the permits long poll and the lease copy it keeps, the admission check, the fence
   raise before a gained shard is served, the warm-up before a shard arrives, and the graceful
   stop.
2. The shard store: one SQLite file per shard, the epoch rule (examples/kv/src/store.rs).
3. The HTTP service around them (examples/kv/src/service.rs, wire.rs).
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import os
import signal
import socket
import sqlite3
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlencode, urlsplit

log = logging.getLogger("kv")
Json = dict[str, Any]  # a JSON object as json.loads gives it

# ==================================================================================================
# Part 1. Leasehold: the sidecar's permits, the admission check, the fence raise, the warm-up,
# the stop.
# ==================================================================================================

POLL_WAIT = "30s"  # the sidecar answers sooner on any change, and before half the copy is left
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.1, 1.0
WARM_KEEP_S = 30.0  # a file opened for a shard that then did not arrive (the plan changed) is closed


def fnv1a_64(data: bytes) -> int:
    """The key-to-shard hash of every Leasehold router (docs/PROTOCOL.md, "The key→shard hash")."""
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


class NotAdmitted(Exception):
    def __init__(self, reason: str, shard: int | None = None):
        super().__init__(reason)
        self.reason, self.shard = reason, shard  # not_admitting or not_owner


@dataclass(frozen=True)
class LeaseCopy:
    """One applied answer of the permits poll. Replaced whole, never changed, so a request reads
    one consistent copy without a lock."""

    answer: Json = field(default_factory=dict)  # empty until the first answer
    expires_ns: int = 0  # on CLOCK_MONOTONIC (time.monotonic_ns())
    shards: dict[int, int] = field(default_factory=dict)  # shard -> epoch

    def view(self) -> Json:
        """GET /permits: what this process admits on, and until when on CLOCK_MONOTONIC, so an
        operator (or a test) on this machine can compare it with the sidecar's admission log."""
        return {
            "revision": self.answer.get("revision"),
            "state": self.answer.get("state", "registering"),  # before the first answer
            "executor_id": self.answer.get("executor_id"),
            "expires_monotonic_ns": self.expires_ns,
            "shards": [{"shard": s, "epoch": e} for s, e in sorted(self.shards.items())],
        }

    def admit(self, key: str) -> tuple[int, int]:
        """Gate 1: the permit (shard, epoch) for `key`, or NotAdmitted (P16.1)."""
        count, live = self.answer.get("shard_count"), time.monotonic_ns() < self.expires_ns
        if self.answer.get("state") != "admitting" or not live or not count:
            raise NotAdmitted("not_admitting")
        shard = fnv1a_64(key.encode()) % count
        if shard not in self.shards:
            raise NotAdmitted("not_owner", shard)
        return shard, self.shards[shard]


class Fences:
    """Gate 2: before this process serves a shard at an epoch, it raises the store's fence to it,
    so a deposed owner's late write is refused even if this process only ever reads the shard."""

    def __init__(self, store: ShardStore, stats: Stats):
        self.store, self.stats, self.lock = store, stats, threading.Lock()
        self.opened: dict[int, int] = {}  # shard -> the epoch this process raised the store to
        self.warmed: dict[int, float] = {}  # shard -> when its file was opened before it arrived

    def open(self, shard: int, epoch: int) -> None:
        """Raises the fence unless done already; StaleEpoch if the store holds a newer epoch."""
        with self.lock:
            if self.opened.get(shard) == epoch:
                return
        before = self.store.raise_epoch(shard, epoch)
        if before < epoch:
            self.stats.add("epoch_raises")
            log.info("shard %d: raised the stored epoch %d -> %d before serving it",
                     shard, before, epoch)
        with self.lock:
            self.opened[shard] = epoch

    def forget(self, shard: int) -> None:
        with self.lock:
            self.opened.pop(shard, None)

    def warm(self, shard: int) -> None:
        """Warm handoffs (P17.1): opens the file of a shard about to arrive and reads it through
        while its holder still serves it. The fence is not touched: the shard is not ours yet, and
        may go elsewhere after all."""
        self.store.warm(shard)
        with self.lock:
            self.warmed[shard] = time.monotonic()

    def follow(self, shards: dict[int, int]) -> None:
        """On an admitting answer: forget the shards that left (and files warmed for shards that
        did not come), raise the ones gained (in parallel: one file locked by a stalled process
        must not hold up the others)."""
        with self.lock:
            gone = [shard for shard in self.opened if shard not in shards]
            gained = [held for held in shards.items() if self.opened.get(held[0]) != held[1]]
            now = time.monotonic()
            gone += [shard for shard, at in self.warmed.items()
                     if shard not in shards and now - at > WARM_KEEP_S]
            for shard in [*gone, *shards]:
                self.warmed.pop(shard, None)
        for shard in gone:
            self.forget(shard)
            self.store.forget(shard)
        if gained:
            with ThreadPoolExecutor(max_workers=8) as pool:
                list(pool.map(self._open_on_arrival, gained))

    def _open_on_arrival(self, held: tuple[int, int]) -> None:
        try:
            self.open(*held)
        except (StaleEpoch, sqlite3.Error, StoreError) as error:
            log.warning("shard %d: not opened on arrival (%s); requests will try again",
                        held[0], error)


class Permits(threading.Thread):
    """Keeps the lease copy: one poll outstanding, the next sent as soon as an answer is applied,
    which acknowledges it (P16.1)."""

    def __init__(self, sidecar: SidecarCall, fences: Fences, ack_delay: float):
        super().__init__(name="permits", daemon=True)
        self.sidecar, self.fences, self.ack_delay = sidecar, fences, ack_delay
        self.copy = LeaseCopy()
        self.warmups = ThreadPoolExecutor(max_workers=4, thread_name_prefix="prepare")
        self.preparing: set[tuple[int, int]] = set()  # (shard, epoch) warming up; under the lock
        self.lock = threading.Lock()
        self.stop_requested = threading.Event()
        self.finished = threading.Event()  # asked to stop, and the sidecar is stopping or gone

    def run(self) -> None:
        backoff = BACKOFF_FIRST_S
        while True:
            stopping = self.stop_requested.is_set() and self.copy.answer.get("state") == "stopping"
            try:
                answer = self._poll("0s" if stopping else POLL_WAIT)
            except SIDECAR_ERRORS as error:
                if self.stop_requested.is_set():
                    break  # asked to stop and the sidecar is gone: nothing more to wait for
                if backoff == BACKOFF_FIRST_S:
                    log.warning("sidecar unreachable (%s): retrying; nothing is admitted once "
                                "the lease copy runs out", error)
                self.stop_requested.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                continue
            if stopping:
                break  # that poll acknowledged "stopping": the sidecar may deregister now
            backoff = BACKOFF_FIRST_S
            self._apply(answer)
        self.finished.set()

    def _poll(self, wait: str) -> LeaseCopy:
        # prepare=true: this service warms up for shards about to arrive (P17.1).
        query = {"wait": wait, "prepare": "true"}
        if self.copy.answer:  # the acknowledgement of the answer applied last, with its token:
            # only the poller that received an answer knows it, so only it acknowledges (P16.1)
            query.update(applied=self.copy.answer["revision"], state=self.copy.answer["state"])
            if "token" in self.copy.answer:  # sidecars before the token have none
                query.update(token=self.copy.answer["token"])
        # Anchored at the instant the request is sent, not answered: the sidecar counted the lease
        # before it answered, so the copy can only end early, never late (P16.1).
        sent_at_ns = time.monotonic_ns()
        answer = self.sidecar("GET", "/v1/local/permits?" + urlencode(query), POLL_TIMEOUT_S)
        shards = {int(held["shard"]): int(held["epoch"]) for held in answer["shards"]}
        return LeaseCopy(answer, sent_at_ns + int(answer["lease_ttl_ms"]) * 1_000_000, shards)

    def _apply(self, new: LeaseCopy) -> None:
        old, revision, state = self.copy, new.answer["revision"], new.answer["state"]
        # Not every new revision is a change: each lease renewal brings one, with the same shards.
        changed = state != old.answer.get("state") or new.shards != old.shards
        if changed and self.ack_delay:
            time.sleep(self.ack_delay)  # --test-ack-delay: a service slow to apply a change
        if old.answer.get("state") == "admitting" and time.monotonic_ns() >= old.expires_ns:
            log.warning("the lease copy ran out before this answer: nothing was admitted meanwhile")
        # Installed first, so the shards this answer dropped stop being admitted at once; a gained
        # shard is still not served before its fence is raised (Fences.open runs before the work).
        self.copy = new
        if changed:
            gained = [f"{s}@{e}" for s, e in sorted(new.shards.items()) if old.shards.get(s) != e]
            lost = [f"{s}@{e}" for s, e in sorted(old.shards.items()) if new.shards.get(s) != e]
            log.info("permits: revision %d, %s, executor %s, %d shards (gained: %s; lost: %s)",
                     revision, state, new.answer["executor_id"], len(new.shards),
                     " ".join(gained) or "none", " ".join(lost) or "none")
        if state == "admitting":
            self.fences.follow(new.shards)
        for item in new.answer.get("preparing", []):
            self._prepare(int(item["shard"]), int(item["epoch"]))

    def _prepare(self, shard: int, epoch: int) -> None:
        """Warms up for a shard about to arrive, off this thread (the next poll acknowledges the
        answer, which must not wait for it), then tells the sidecar, which tells the leader: the
        holder is revoked only then, or after the leader's wait (P17.1)."""
        with self.lock:
            if (shard, epoch) in self.preparing:
                return
            self.preparing.add((shard, epoch))
        self.warmups.submit(self._warm, shard, epoch)

    def _warm(self, shard: int, epoch: int) -> None:
        try:
            self.fences.warm(shard)
            self.sidecar("POST", f"/v1/local/prepared?shard={shard}&epoch={epoch}",
                         STOP_TIMEOUT_S)
            log.info("shard %d: prepared for its arrival at epoch %d (file open and read)",
                     shard, epoch)
        except (StaleEpoch, sqlite3.Error, StoreError) as error:
            log.warning("shard %d: not warmed (%s); it is opened on arrival", shard, error)
        except SIDECAR_ERRORS as error:
            # 409: the leader stopped waiting, and the handoff went on without us.
            log.info("shard %d: prepared too late for the handoff (%s)", shard, error)
        finally:
            with self.lock:
                self.preparing.discard((shard, epoch))


def stop_gracefully(permits: Permits) -> None:
    """SIGTERM/SIGINT: ask the sidecar for the graceful stop (P3.7) and keep serving until it says
    `stopping` (the permits loop acknowledges that) or is gone. It then deregisters, so the shards
    move at once instead of after the lease."""
    log.info("stop requested: asking the sidecar for the graceful stop")
    permits.stop_requested.set()
    try:
        permits.sidecar("POST", "/v1/local/stop", STOP_TIMEOUT_S)
        permits.finished.wait()
    except SIDECAR_ERRORS as error:
        log.warning("the sidecar did not take the stop (%s): it is gone or not a sidecar", error)
    log.info("the sidecar is stopping or gone: exiting")


# ==================================================================================================
# Part 2. The shard store: the same files and epoch rule as examples/kv/src/store.rs.
# ==================================================================================================

BUSY_TIMEOUT_S = 5.0  # as the Rust example: a lock held this long means a stalled process
SCHEMA = """
    CREATE TABLE IF NOT EXISTS fence (
        shard INTEGER PRIMARY KEY NOT NULL,
        epoch INTEGER NOT NULL CHECK (epoch >= 0)
    );
    CREATE TABLE IF NOT EXISTS kv (
        key TEXT PRIMARY KEY NOT NULL,
        value TEXT NOT NULL,
        epoch INTEGER NOT NULL CHECK (epoch >= 0)
    );
"""


class StaleEpoch(Exception):
    """The store has accepted a newer owner's epoch; nothing was changed."""

    def __init__(self, store_epoch: int):
        super().__init__(f"the store holds epoch {store_epoch}")
        self.store_epoch = store_epoch


class StoreError(Exception):
    """A shard file that is not this shard's (copied or renamed)."""


def is_busy(error: Exception) -> bool:
    """Whether another process holds the shard's lock: retrying later can succeed."""
    code = getattr(error, "sqlite_errorcode", 0) & 0xFF
    return code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


class _ShardFile:
    """One shard's connection. It serves one transaction at a time, hence the lock; `connection`
    is None once forgotten."""

    def __init__(self, connection: sqlite3.Connection):
        self.lock = threading.Lock()
        self.connection: sqlite3.Connection | None = connection


class ShardStore:
    """`shard-NNNNN.sqlite3` files in a directory every process of the service shares."""

    def __init__(self, directory: str):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._files: dict[int, _ShardFile] = {}

    def path_of(self, shard: int) -> Path:
        return self.dir / f"shard-{shard:05d}.sqlite3"

    def raise_epoch(self, shard: int, epoch: int) -> int:
        """Raises the stored epoch to `epoch`, never lowering it; returns the epoch before.
        StaleEpoch if it is higher: another owner came after us."""
        with self._transaction(shard, "BEGIN IMMEDIATE") as connection:
            stored = self._fence(connection, shard)
            if stored > epoch:
                raise StaleEpoch(stored)
            if stored < epoch:
                connection.execute("UPDATE fence SET epoch = ? WHERE shard = ?", (epoch, shard))
            return stored

    def put(self, shard: int, epoch: int, key: str, value: str) -> None:
        """The epoch rule: in one transaction with the write, a lower epoch than stored is refused
        (StaleEpoch, nothing written); a higher one becomes the stored epoch."""
        with self._transaction(shard, "BEGIN IMMEDIATE") as connection:
            stored = self._fence(connection, shard)
            if epoch < stored:
                raise StaleEpoch(stored)
            if epoch > stored:
                connection.execute("UPDATE fence SET epoch = ? WHERE shard = ?", (epoch, shard))
            connection.execute(
                "INSERT INTO kv (key, value, epoch) VALUES (?, ?, ?) ON CONFLICT (key) "
                "DO UPDATE SET value = excluded.value, epoch = excluded.epoch",
                (key, value, epoch))

    def get(self, shard: int, epoch: int, key: str) -> tuple[str, int] | None:
        """(value, written_epoch) or None; StaleEpoch if the reader is deposed."""
        with self._transaction(shard, "BEGIN DEFERRED") as connection:
            stored = self._fence(connection, shard)
            if epoch < stored:
                raise StaleEpoch(stored)
            row = connection.execute("SELECT value, epoch FROM kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else (str(row[0]), int(row[1]))

    def warm(self, shard: int) -> None:
        """Opens the shard's file and reads it through, leaving the connection open for its
        arrival; the fence is only read."""
        with self._transaction(shard, "BEGIN DEFERRED") as connection:
            connection.execute("SELECT count(*), sum(length(value)) FROM kv").fetchone()

    def forget(self, shard: int) -> None:
        """Closes the connection of a shard no longer held (a later use reopens it)."""
        with self._lock:
            file = self._files.pop(shard, None)
        if file is not None:
            with file.lock:
                if file.connection is not None:
                    file.connection.close()
                file.connection = None

    @staticmethod
    def _fence(connection: sqlite3.Connection, shard: int) -> int:
        return int(connection.execute("SELECT epoch FROM fence WHERE shard = ?", (shard,))
                   .fetchone()[0])

    @contextmanager
    def _transaction(self, shard: int, begin: str) -> Iterator[sqlite3.Connection]:
        file = self._locked_file(shard)
        try:
            connection = file.connection
            assert connection is not None
            # IMMEDIATE takes the write lock before the read, so no other process changes the
            # fence between our compare and our write.
            connection.execute(begin)
            try:
                yield connection
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
        finally:
            file.lock.release()

    def _locked_file(self, shard: int) -> _ShardFile:
        while True:
            with self._lock:
                file = self._files.get(shard)
                if file is None:
                    file = self._files[shard] = _ShardFile(self._open(shard))
            file.lock.acquire()
            if file.connection is not None:
                return file
            file.lock.release()  # forgotten while we waited for it: take a fresh one

    def _open(self, shard: int) -> sqlite3.Connection:
        path = self.path_of(shard)
        connection = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                     check_same_thread=False)
        try:
            # Rollback journal, not WAL: WAL needs shared memory between the processes, which
            # shared storage does not give. FULL sync: a write is acknowledged once on disk.
            connection.executescript(
                "PRAGMA journal_mode = DELETE; PRAGMA synchronous = FULL;" + SCHEMA)
            connection.execute("INSERT OR IGNORE INTO fence (shard, epoch) VALUES (?, 0)", (shard,))
            for (found,) in connection.execute("SELECT shard FROM fence").fetchall():
                if found != shard:
                    raise StoreError(f"shard file {path} belongs to shard {found}, not {shard}")
        except BaseException:
            connection.close()
            raise
        return connection


# ==================================================================================================
# Part 3. The HTTP service: routes, bodies and statuses of examples/kv (service.rs, wire.rs).
# ==================================================================================================

MAX_KEY_BYTES = 1024  # the executor library's bound on a key
MAX_VALUE_BYTES = 64 * 1024
MAX_BODY_BYTES = 1024 * 1024  # a 64 KiB value with every character escaped fits
SLOW_PREFIX = "slow-"  # --test-write-delay holds writes of these keys only
PROBLEM_TYPE_BASE = "https://leasehold.dev/problems/"
TITLES = {
    "invalid_request": "Invalid request", "not_found": "Not found", "conflict": "Conflict",
    "method_not_allowed": "Method not allowed", "payload_too_large": "Payload too large",
    "unsupported_media_type": "Unsupported media type", "unavailable": "Unavailable",
    "internal": "Internal error",
}
STATUSES = {
    "invalid_request": 400, "not_found": 404, "conflict": 409, "method_not_allowed": 405,
    "payload_too_large": 413, "unsupported_media_type": 415, "unavailable": 503, "internal": 500,
}
STAT_NAMES = ("writes_accepted", "stale_writes_refused", "reads", "misdirected",
              "fenced_by_store", "epoch_raises", "writes_in_flight")


class Problem(Exception):
    """An answer of RFC 9457 `application/problem+json`, as leasehold_api::problem builds them."""

    def __init__(self, code: str, detail: str, status: int | None = None,
                 **extension: int | str | None):
        super().__init__(detail)
        self.status = status or STATUSES[code]
        self.document = {"type": PROBLEM_TYPE_BASE + code, "title": TITLES[code],
                         "status": self.status, "detail": detail, "code": code,
                         # None of these codes is retryable without side effects (P7.1).
                         "retryable": False}
        self.document.update((k, v) for k, v in extension.items() if v is not None)


def refusal(status: int, reason: str, detail: str, shard: int | None = None,
            epoch: int | None = None, store_epoch: int | None = None) -> Problem:
    """421 or 409 with code `conflict` and the service's `reason` (wire.rs, KvProblem)."""
    return Problem("conflict", detail, status, reason=reason, shard=shard, epoch=epoch,
                   store_epoch=store_epoch)


class Stats:
    """GET /stats: what this process has done since it started (wire.rs, KvStats)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(STAT_NAMES, 0)

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    @contextmanager
    def in_flight(self) -> Iterator[None]:
        self.add("writes_in_flight")
        try:
            yield
        finally:
            self.add("writes_in_flight", -1)


class KvService:
    """The three gates of examples/kv/src/service.rs: admission (the lease copy), the fence raise
    (Fences), and the epoch rule (ShardStore.put)."""

    def __init__(self, permits: Permits, fences: Fences, store: ShardStore, stats: Stats,
                 write_delay: float):
        self.permits, self.fences, self.store, self.stats = permits, fences, store, stats
        self.write_delay = write_delay

    def put(self, raw_key: str, content_type: str | None, body: bytes) -> Json:
        value = parse_put_body(content_type, body)
        key = decode_key(raw_key)
        shard, epoch = self._admit(key)
        self._open(shard, epoch)
        with self.stats.in_flight():
            if self.write_delay and key.startswith(SLOW_PREFIX):
                log.info("test delay: holding the write of %r (shard %d, epoch %d) for %.3f s",
                         key, shard, epoch, self.write_delay)
                time.sleep(self.write_delay)
            try:
                self.store.put(shard, epoch, key, value)
            except StaleEpoch as stale:
                self.stats.add("stale_writes_refused")
                log.warning("shard %d: write of %r at epoch %d refused by the store, which holds "
                            "epoch %d", shard, key, epoch, stale.store_epoch)
                raise refusal(409, "stale_epoch",
                              f"the store refused the write: it carries epoch {epoch} of shard "
                              f"{shard}, and the store has accepted epoch {stale.store_epoch} "
                              "from a newer owner; nothing was written",
                              shard, epoch, stale.store_epoch) from None
        self.stats.add("writes_accepted")
        return {"key": key, "shard": shard, "epoch": epoch}

    def get(self, raw_key: str) -> Json:
        key = decode_key(raw_key)
        shard, epoch = self._admit(key)
        self._open(shard, epoch)
        try:
            row = self.store.get(shard, epoch, key)
        except StaleEpoch as stale:
            self.fences.forget(shard)  # the next request raises again and learns it is superseded
            raise self._fenced(shard, epoch, stale.store_epoch) from None
        self.stats.add("reads")
        if row is None:
            raise Problem("not_found", f"no value for key {json.dumps(key)}")
        return {"key": key, "value": row[0], "shard": shard, "epoch": epoch,
                "written_epoch": row[1]}

    def _admit(self, key: str) -> tuple[int, int]:
        if not 1 <= len(key.encode()) <= MAX_KEY_BYTES:
            raise Problem("invalid_request", f"a key is 1 to {MAX_KEY_BYTES} bytes long")
        try:
            return self.permits.copy.admit(key)
        except NotAdmitted as refused:
            self.stats.add("misdirected")
            if refused.reason == "not_owner":
                detail = "this executor does not hold the key's shard; refresh the routing table"
            else:
                detail = ("this executor is not admitting work (lease lapsed, not registered, or "
                          "stopping); refresh the routing table")
            raise refusal(421, refused.reason, detail, refused.shard) from None

    def _open(self, shard: int, epoch: int) -> None:
        try:
            self.fences.open(shard, epoch)
        except StaleEpoch as stale:
            raise self._fenced(shard, epoch, stale.store_epoch) from None

    def _fenced(self, shard: int, epoch: int, store_epoch: int) -> Problem:
        self.stats.add("misdirected")
        self.stats.add("fenced_by_store")
        log.warning("shard %d: the store holds epoch %d, newer than ours (%d): not serving it",
                    shard, store_epoch, epoch)
        return refusal(421, "fenced",
                       f"shard {shard}: the store has accepted epoch {store_epoch}, newer than "
                       f"this process's {epoch}; another executor owns it now",
                       shard, epoch, store_epoch)


def decode_key(raw: str) -> str:
    try:
        return unquote(raw, errors="strict")
    except UnicodeDecodeError:
        raise Problem("invalid_request", "the key is not valid percent-encoded UTF-8") from None


def parse_put_body(content_type: str | None, body: bytes) -> str:
    """`{"value": "..."}` and nothing else, as serde's deny_unknown_fields takes it."""
    essence = (content_type or "").split(";")[0].strip().lower()
    if not (essence == "application/json" or
            (essence.startswith("application/") and essence.endswith("+json"))):
        raise Problem("unsupported_media_type", "expected Content-Type: application/json")
    try:
        request = json.loads(body)
    except ValueError as error:  # also a body that is not UTF-8
        raise Problem("invalid_request", f"the body is not JSON: {error}") from None
    if not isinstance(request, dict) or set(request) != {"value"}:
        raise Problem("invalid_request", 'the body must be {"value": "..."} and nothing else')
    value = request["value"]
    if not isinstance(value, str):
        raise Problem("invalid_request", "value: expected a string")
    try:
        size = len(value.encode())
    except UnicodeEncodeError:  # a lone surrogate escape, which JSON text cannot carry in UTF-8
        raise Problem("invalid_request", "value: not valid Unicode") from None
    if size > MAX_VALUE_BYTES:
        raise Problem("invalid_request", f"a value is at most {MAX_VALUE_BYTES} bytes long")
    return value


class Handler(BaseHTTPRequestHandler):
    server: KvServer
    server_version = "leasehold-kv-python"
    timeout = 30  # a client that stops sending does not hold a thread (and the exit) forever

    def do_GET(self) -> None:
        self._route("GET")

    def do_PUT(self) -> None:
        self._route("PUT")

    def do_POST(self) -> None:
        self._route("POST")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def _route(self, method: str) -> None:
        service = self.server.service
        path = urlsplit(self.path).path
        try:
            if path.startswith("/kv/") and "/" not in path[len("/kv/"):]:
                key = path[len("/kv/"):]
                if method == "GET":
                    self._send(200, service.get(key))
                elif method == "PUT":
                    self._send(200, service.put(key, self.headers.get("Content-Type"),
                                                self._body()))
                else:
                    raise Problem("method_not_allowed", "this endpoint does not take that method")
            elif path == "/stats":
                if method != "GET":
                    raise Problem("method_not_allowed", "this endpoint does not take that method")
                self._send(200, service.stats.snapshot())
            elif path == "/permits":
                if method != "GET":
                    raise Problem("method_not_allowed", "this endpoint does not take that method")
                self._send(200, service.permits.copy.view())
            else:
                raise Problem("not_found", "no such endpoint")
        except Problem as refused:
            self._send(refused.status, refused.document, "application/problem+json")
        except Exception as error:  # the store failed: never leak internals, log them
            if is_busy(error):
                log.warning("store busy: %s", error)
                failed = Problem("unavailable", "the shard's store is locked by another "
                                 "process; nothing was written, retry")
            else:
                log.exception("store failed")
                failed = Problem("internal", "store; see the server log")
            self._send(failed.status, failed.document, "application/problem+json")

    def _body(self) -> bytes:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise Problem("invalid_request", "Content-Length is not a number") from None
        if length > MAX_BODY_BYTES:
            raise Problem("payload_too_large",
                          f"request body is larger than {MAX_BODY_BYTES} bytes")
        return self.rfile.read(length)

    def _send(self, status: int, document: Json, content_type: str = "application/json") -> None:
        body = json.dumps(document, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        pass  # one line per state change, not per request


class KvServer(ThreadingHTTPServer):
    # Not daemon threads: server_close() waits for requests in flight, so an admitted write
    # finishes (committed or refused) before the process exits.
    daemon_threads = False

    def __init__(self, address: tuple[str, int], service: KvService):
        super().__init__(address, Handler)
        self.service = service


# The sidecar's local API over HTTP. These errors mean "no usable answer" (refused, reset, timed
# out, not 2xx, not the JSON expected): a poll that fails is retried.
SIDECAR_ERRORS = (OSError, http.client.HTTPException, ValueError, KeyError, TypeError)
SidecarCall = Callable[[str, str, float], Json]
POLL_TIMEOUT_S = 40.0  # past POLL_WAIT: only a stuck sidecar hits it, and the copy runs out anyway
STOP_TIMEOUT_S = 5.0


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over a unix socket (`--sidecar unix:/path`)."""

    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


def sidecar_client(url: str) -> SidecarCall:
    """`call(method, path, timeout)`: the sidecar's JSON answer ({} when empty), one connection
    per call; raises one of SIDECAR_ERRORS."""
    if url.startswith("unix:"):
        def connect(timeout: float) -> http.client.HTTPConnection:
            return UnixHTTPConnection(url[len("unix:"):], timeout)
    else:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port or 80  # a bad port raises ValueError here
        if parts.scheme != "http" or not host:
            raise ValueError(f"--sidecar {url!r}: expected http://HOST:PORT or unix:/path")

        def connect(timeout: float) -> http.client.HTTPConnection:
            return http.client.HTTPConnection(host, port, timeout=timeout)

    def call(method: str, path: str, timeout: float) -> Json:
        connection = connect(timeout)
        try:
            connection.request(method, path)
            response = connection.getresponse()
            body = response.read()
        finally:
            connection.close()
        if not 200 <= response.status < 300:
            raise ValueError(f"{method} {path} answered {response.status}: {body[:300]!r}")
        return json.loads(body) if body else {}

    return call


def host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected HOST:PORT")
    return host, int(port)


def seconds(text: str) -> float:
    """A duration: `2.5` (seconds), `2s` or `500ms`, as the Rust example's flags take them."""
    number, scale = (text[:-2], 0.001) if text.endswith("ms") else (text.removesuffix("s"), 1.0)
    try:
        value = float(number) * scale
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a duration such as 2.5, 2s or 500ms")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Example: the key-value service of examples/kv beside a leasehold-executor "
                    "sidecar, every write fenced by its shard's epoch.")
    parser.add_argument("--sidecar", required=True,
                        help="the sidecar's local API: http://127.0.0.1:PORT or unix:/path")
    parser.add_argument("--listen", required=True, type=host_port, help="HOST:PORT to serve on")
    parser.add_argument("--store-dir", required=True,
                        help="the shard files' directory, shared by every process of the service")
    parser.add_argument("--test-ack-delay", type=seconds, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--test-write-delay", type=seconds, default=0.0, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s kv.py %(levelname)s %(message)s")
    try:
        sidecar = sidecar_client(args.sidecar)
    except ValueError as error:
        log.error("%s", error)
        return 2
    try:
        store, stats = ShardStore(args.store_dir), Stats()
        fences = Fences(store, stats)
        permits = Permits(sidecar, fences, args.test_ack_delay)
        service = KvService(permits, fences, store, stats, args.test_write_delay)
        server = KvServer(args.listen, service)
    except OSError as error:
        log.error("cannot start: %s", error)
        return 1
    for name, delay in (("ack", args.test_ack_delay), ("write", args.test_write_delay)):
        if delay:
            log.warning("test %s delay on: %.3f s", name, delay)

    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        if stop.is_set():
            os._exit(1)  # a second signal: the operator does not want to wait
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    permits.start()
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    host, port = server.server_address[:2]
    log.info("serving on %s:%d, store %s, sidecar %s", host, port, args.store_dir, args.sidecar)
    stop.wait()
    stop_gracefully(permits)
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
