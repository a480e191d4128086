"""An HTTP request head read off a socket within a byte budget and a deadline.

The stdlib handler reads the head with no deadline and accepts up to 100 header lines of 64 KiB:
a client that connects and sends nothing, or trickles a byte every few seconds, holds a server
thread forever. Here the whole head must arrive within one deadline and one size.
"""

from __future__ import annotations

import socket
import time
from http import HTTPStatus


class HeadRefused(Exception):
    """A request began but its head cannot be read; answer `status`, then close."""

    def __init__(self, status: HTTPStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _too_large(buffer: bytes, max_bytes: int) -> HeadRefused:
    if b"\n" in buffer[: max_bytes + 1]:
        return HeadRefused(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, f"head over {max_bytes} B")
    return HeadRefused(HTTPStatus.REQUEST_URI_TOO_LONG, f"request line over {max_bytes} B")


def _head_end(buffer: bytes) -> int | None:
    """Where the head in `buffer` ends (just past its blank line), if it is complete."""
    ends = [i + len(sep) for sep in (b"\n\n", b"\n\r\n") if (i := buffer.find(sep)) >= 0]
    return min(ends) if ends else None


class HeadReader:
    """Reads successive request heads off one connection; bytes past a head wait for the next."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = b""

    def read(self, max_bytes: int, timeout_s: float) -> bytes | None:
        """The next head through its blank line; None when the peer closed or stayed silent.

        Raises HeadRefused when a request began and then outgrew `max_bytes`, stopped short of
        its blank line, or did not complete within `timeout_s`.
        """
        deadline = time.monotonic() + timeout_s
        self._buffer = self._buffer.lstrip(b"\r\n")  # blank lines before a request are skipped
        while (end := _head_end(self._buffer)) is None:
            if len(self._buffer) > max_bytes:
                raise _too_large(self._buffer, max_bytes)
            chunk = self._receive(deadline - time.monotonic())
            if chunk is None and self._buffer:
                raise HeadRefused(HTTPStatus.REQUEST_TIMEOUT, f"no full head in {timeout_s:g} s")
            if chunk == b"" and self._buffer:
                raise HeadRefused(HTTPStatus.BAD_REQUEST, "the head stopped short")
            if not chunk:
                return None
            self._buffer = (self._buffer + chunk).lstrip(b"\r\n")
        if end > max_bytes:
            raise _too_large(self._buffer, max_bytes)
        head, self._buffer = self._buffer[:end], self._buffer[end:]
        return head

    def _receive(self, remaining_s: float) -> bytes | None:
        """Up to 4 KiB, b"" when the peer closed, None when the deadline passed first."""
        if remaining_s <= 0:
            return None
        self._sock.settimeout(remaining_s)
        try:
            return self._sock.recv(4096)
        except TimeoutError:
            return None
