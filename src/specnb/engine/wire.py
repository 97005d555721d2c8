"""HTTP/1.1 streaming on raw asyncio protocols: the load generator's hot path.

A load generator that cannot keep up makes every high-concurrency point wrong. Profiled on
one core (py-spy, c=64, aiohttp + line-by-line parsing): aiohttp's readline 24 %, ``json``
21 %, the event loop 15 %, the SSE parser 13 %. So nothing is parsed while a point runs:

* one :class:`Connection` (an ``asyncio.Protocol``) per in-flight slot, kept alive; a
  request's bytes (head + JSON body) are built once per prompt, the response head is parsed
  once per request, the body never while the point runs;
* every socket read is stamped once (:data:`clock`, in ``data_received``) and kept as it
  came; the end of a response is seen from its last 7 bytes (``0\\r\\n\\r\\n`` closing a
  chunked body) or from the byte count of a ``Content-Length`` body;
* after the point, :func:`parse_response` de-chunks, splits SSE lines and feeds them to
  :class:`~specnb.engine.records.StreamParser`, the same parser (fields, digests, error texts)
  as ever. A chunk's arrival time is that of the socket read that completed its ``data:``
  line: the instant the line was whole on this side, as a line reader would see it.

The clock is ``time.monotonic`` (``CLOCK_MONOTONIC`` on Linux: one system-wide clock, so
worker processes of one point share it; :mod:`specnb.engine.clients`).
"""

from __future__ import annotations

import asyncio
import json
import ssl as _ssl
import time
from bisect import bisect_right
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

__all__ = ["clock", "Target", "Connection", "Raw", "parse_response", "dechunk", "LoopWaits"]

clock = time.monotonic

_CHUNKED_END = b"0\r\n\r\n"
_TAIL = b"\r\n" + _CHUNKED_END  # the last 7 bytes of every chunked body
# set by aiohttp itself, or meaningless on a raw connection
_SKIP_HEADERS = {"host", "content-length", "content-type", "transfer-encoding", "connection"}

# (body pieces as read, their read times, chunked transfer encoding?)
Raw = tuple[list[bytes], list[float], bool]


class Target:
    """Where requests go: host, port, TLS, path, and the request head built once."""

    def __init__(self, base_url: str, path: str, headers: Mapping[str, str] | None = None):
        u = urlsplit(base_url.rstrip("/"))
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"base URL must be http(s)://host[:port][/prefix], got {base_url!r}")
        https = u.scheme == "https"
        self.host = u.hostname
        self.port = u.port or (443 if https else 80)
        self.ssl = _ssl.create_default_context() if https else None
        self.server_hostname = self.host if https else None
        self.path = (u.path or "") + path
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items() if k.lower() not in _SKIP_HEADERS)
        host = self.host if ":" not in self.host else f"[{self.host}]"
        self._head = (f"POST {self.path} HTTP/1.1\r\nHost: {host}:{self.port}\r\n"
                      f"Content-Type: application/json\r\nAccept: */*\r\n{extra}Content-Length: ").encode("latin-1")

    def request(self, body: dict[str, Any]) -> bytes:
        data = json.dumps(body).encode()
        return self._head + str(len(data)).encode() + b"\r\n\r\n" + data


class Connection(asyncio.Protocol):
    """One keep-alive connection carrying one streaming request at a time.

    :meth:`send` writes a request for a record; when the response is complete (or failed,
    or timed out) ``on_end(self, record)`` is called from the event loop. The body's reads
    and their times go to ``raw[record.index]``; an HTTP error's text goes to the record.
    """

    __slots__ = ("target", "loop", "timeout_s", "raw", "t0", "transport", "rec", "on_end", "bufs", "times",
                 "head_seen", "status", "chunked", "length", "got", "tail", "close_after", "timer", "encoding")

    def __init__(self, target: Target, timeout_s: float, raw: dict[int, Raw]):
        self.target = target
        self.loop: asyncio.AbstractEventLoop | None = None
        self.timeout_s = timeout_s
        self.raw = raw
        self.t0 = 0.0
        self.transport: asyncio.Transport | None = None
        self.rec: Any = None
        self.on_end: Callable[[Connection, Any], None] | None = None
        self.timer: asyncio.TimerHandle | None = None

    # ---- connection ------------------------------------------------------------------------
    async def connect(self) -> None:
        self.loop = asyncio.get_running_loop()
        t = self.target
        await self.loop.create_connection(lambda: self, t.host, t.port, ssl=t.ssl,
                                          server_hostname=t.server_hostname)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.rec is not None:
            if self.head_seen and self.length is None and not self.chunked:
                self._finish(clock())  # a body that runs until the server closes
            else:
                self._fail(f"ConnectionError: connection lost{': ' + str(exc) if exc else ''}")

    @property
    def usable(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
            self.transport = None

    # ---- one request -----------------------------------------------------------------------
    def send(self, rec: Any, data: bytes, t0: float, on_end: Callable[[Connection, Any], None]) -> None:
        """Send ``data`` for ``rec`` now (the connection must be usable); stamps ``rec.start_s``."""
        self.bufs: list[bytes] = []
        self.times: list[float] = []
        self.head_seen = False
        self.status = 0
        self.chunked = False
        self.length: int | None = None
        self.got = 0
        self.tail = b""
        self.close_after = False
        self.encoding: str | None = None
        self.t0 = t0
        self.rec = rec
        self.on_end = on_end
        rec.start_s = clock() - t0
        self.timer = self.loop.call_later(self.timeout_s, self._timeout)
        self.transport.write(data)

    def _timeout(self) -> None:
        self.timer = None
        self._fail(f"TimeoutError: no complete response in {self.timeout_s:g} s")

    def data_received(self, data: bytes) -> None:
        t = clock()
        if self.rec is None:
            return  # bytes after a response that was closed out (a failed one): ignored
        if not self.head_seen:
            self.bufs.append(data)
            if len(self.bufs) > 1:
                data = b"".join(self.bufs)
                self.bufs = [data]
            e = data.find(b"\r\n\r\n")
            if e < 0:
                return
            self.bufs = []
            self._head(data[:e])
            data = data[e + 4:]
            if not data:
                if self.length == 0:
                    self._finish(t)
                return
        self.bufs.append(data)
        self.times.append(t)
        if self.chunked:
            tail = data[-7:] if len(data) >= 7 else (self.tail + data)[-7:]
            self.tail = tail
            # a chunk whose data ends with "\r\n0\r\n\r\n" could fool this, but a chunk's own
            # trailing CRLF follows its data: the 7 bytes end a body only as the last chunk
            if tail == _TAIL or (tail[-5:] == _CHUNKED_END and self._only_end_chunk()):
                self._finish(t)
        elif self.length is not None:
            self.got += len(data)
            if self.got >= self.length:
                self._finish(t)

    def _only_end_chunk(self) -> bool:
        """An empty chunked body (just the end chunk): '0\\r\\n\\r\\n' with nothing before it."""
        return sum(len(b) for b in self.bufs) == 5

    def _head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        try:
            self.status = int(parts[1])
        except (IndexError, ValueError):
            self.status = 0
        self.head_seen = True
        for line in lines[1:]:
            k, _, v = line.partition(":")
            k, v = k.strip().lower(), v.strip()
            if k == "transfer-encoding" and "chunked" in v.lower():
                self.chunked = True
            elif k == "content-length":
                try:
                    self.length = int(v)
                except ValueError:
                    self.length = None
            elif k == "connection" and v.lower() == "close":
                self.close_after = True
            elif k == "content-encoding" and v.lower() not in ("", "identity"):
                self.encoding = v
        if parts[0] == "HTTP/1.0":
            self.close_after = True
        if self.chunked:
            self.length = None
        self.rec.http_status = self.status

    def _done(self) -> Any:
        rec, self.rec = self.rec, None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        return rec

    def _finish(self, t: float) -> None:
        rec = self._done()
        rec.end_s = t - self.t0
        if self.status != 200:
            body = b"".join(dechunk(self.bufs, self.times)[0]) if self.chunked and self.bufs else b"".join(self.bufs)
            rec.error = f"HTTP {self.status}: {body.decode('utf-8', 'replace')[:300]}"
        elif self.encoding is not None:
            rec.error = f"unsupported Content-Encoding {self.encoding!r} (the client asks for none)"
        else:
            self.raw[rec.index] = (self.bufs, self.times, self.chunked)
        self.bufs = self.times = []  # type: ignore[assignment]
        if self.close_after:
            self.close()
        self.on_end(self, rec)

    def _fail(self, msg: str) -> None:
        if self.rec is None:
            return
        rec = self._done()
        rec.error = msg[:300]
        rec.end_s = clock() - self.t0
        if self.bufs and self.status == 200:
            self.raw[rec.index] = (self.bufs, self.times, self.chunked)  # what did arrive is still timed
        self.bufs = self.times = []  # type: ignore[assignment]
        if self.transport is not None:
            self.transport.abort()
            self.transport = None
        self.on_end(self, rec)


def dechunk(bufs: list[bytes], times: list[float]) -> tuple[list[bytes], list[float], str | None]:
    """Chunked transfer encoding -> body pieces, each with the read time of the bytes it came
    from (a chunk split over two reads becomes two pieces), and an error text or None."""
    raw = b"".join(bufs) if len(bufs) != 1 else bufs[0]
    starts, o = [], 0
    for b in bufs:
        starts.append(o)
        o += len(b)
    out_b: list[bytes] = []
    out_t: list[float] = []
    pos, n = 0, len(raw)
    while True:
        j = raw.find(b"\r\n", pos)
        if j < 0:
            return out_b, out_t, "chunked body ended inside a chunk header"
        try:
            size = int(raw[pos:j].split(b";", 1)[0], 16)
        except ValueError:
            return out_b, out_t, f"bad chunk header {raw[pos:j][:40]!r}"
        if size == 0:
            return out_b, out_t, None
        a, b = j + 2, j + 2 + size
        if b > n:
            return out_b, out_t, "chunked body ended inside a chunk"
        k = bisect_right(starts, a) - 1
        while a < b:
            pe = starts[k] + len(bufs[k])
            e = b if b < pe else pe
            out_b.append(raw[a:e])
            out_t.append(times[k])
            a = e
            k += 1
        pos = b + 2


def parse_response(parser: Any, raw: Raw, t0: float) -> str | None:
    """Feed a response kept raw to ``parser`` (a StreamParser), line by line, each line at the
    time of the read that completed it (relative to ``t0``); returns a framing error or None."""
    bufs, times, chunked = raw
    if not bufs:
        return None
    err = None
    if chunked:
        bufs, times, err = dechunk(bufs, times)
    carry = b""
    for b, t in zip(bufs, times, strict=True):
        if carry:
            b = carry + b
        lines = b.split(b"\n")
        carry = lines.pop()
        tr = t - t0
        for line in lines:
            if line:
                parser.feed(line, tr)
                if parser.done:
                    return err
    if carry and times:
        parser.feed(carry, times[-1] - t0)
    return err


class LoopWaits:
    """Seconds the event loop spent waiting for I/O, over a span: ``1 - waited / wall`` is how
    busy the client was. Unlike CPU seconds it also reads 1 when the client had work but no
    core (a host shared with the server), which is when it delays reads just the same.
    Only the stdlib selector loops expose their selector; on others (uvloop) it reads None."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.waited = 0.0
        self._sel = getattr(loop, "_selector", None)
        self._t0 = clock()
        if self._sel is None or not hasattr(self._sel, "select"):
            self._sel = None
            return
        orig = self._sel.select

        def select(timeout: float | None = None) -> Any:
            if timeout == 0:
                return orig(0)
            t = clock()
            try:
                return orig(timeout)
            finally:
                self.waited += clock() - t

        self._sel.select = select

    def busy_share(self) -> float | None:
        """Share of the span the loop was not waiting; stops measuring."""
        if self._sel is None:
            return None
        try:
            del self._sel.select  # the instance attribute: the class's method again
        except AttributeError:
            pass
        self._sel = None
        wall = clock() - self._t0
        return max(0.0, 1.0 - self.waited / wall) if wall > 0 else None
