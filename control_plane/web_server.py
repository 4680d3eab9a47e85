"""`python -m control_plane.web_server [daphne's arguments]`: the portal's HTTP server, Daphne with
a deadline on reading each request.

Daphne (4.x) has no timeout for a client that is slow to send its request: Twisted's idle timeout
restarts at every byte, so one byte every few seconds holds a connection (and a file descriptor)
for ever, and a few hundred such clients starve the portal (issue 28: 0 of 200 slow connections
were closed in 150 s). Its `--http-timeout` bounds the application's answer, not the client's
request. So each HTTP connection gets, like Apache's mod_reqtimeout:

- `WEB_HEADER_TIMEOUT` (20 s) for the request line and headers, counted from when the server
  starts waiting for a request: the connection opening, or the previous response written (so it
  is also how long an idle keep-alive connection stays);
- `WEB_BODY_TIMEOUT` (20 s) for the body, one second more for every `WEB_BODY_MIN_RATE` bytes
  (500) that arrive: a slow but steady upload finishes, a trickle does not.

A request left unfinished at its deadline gets `408 Request Timeout`; the server then closes its
side and drops whatever else the client sends for `LINGER` seconds before cutting the connection
(closing at once with the client's bytes unread would make the kernel send a reset, and the client
could lose the 408). A connection idle at its deadline is simply closed. Once a request is complete the deadline stops:
the application takes the time it needs, and a WebSocket, once upgraded, is the WebSocket
server's (its handshake has Daphne's own 5 s limit).

Daphne builds its HTTP factory in `daphne.server`; this module swaps in one whose connections
keep the deadlines, then runs Daphne's own command line. `tests/security/test_portal_server.py`
holds the real process to it, so a Daphne or Twisted upgrade that moves these hooks fails there.
"""

from __future__ import annotations

import os
import sys

# First: importing daphne.server installs Twisted's asyncio reactor, which must happen before
# anything imports `twisted.internet.reactor`.
import daphne.server
from daphne import http_protocol
from twisted.internet import reactor
from twisted.web import http

HEADER_TIMEOUT = float(os.environ.get("WEB_HEADER_TIMEOUT") or 20)
BODY_TIMEOUT = float(os.environ.get("WEB_BODY_TIMEOUT") or 20)
BODY_MIN_RATE = float(os.environ.get("WEB_BODY_MIN_RATE") or 500)  # bytes/s that extend it

LINGER = 2.0  # seconds a timed-out client has to read the 408 before the connection is cut

_REQUEST_TIMEOUT = (
    b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Type: text/plain\r\n"
    b"Content-Length: 42\r\n\r\nThe request did not arrive in time: closed."
)


class DeadlineChannel(http.HTTPChannel):
    """Twisted's HTTP/1.1 channel with a deadline while it waits for a request (module doc)."""

    _deadline: float | None = None
    _deadline_call = None
    _linger_call = None  # set once timed out: what arrives is dropped until the cut

    def dataReceived(self, data: bytes) -> None:
        if self._linger_call is None:
            super().dataReceived(data)

    def connectionMade(self) -> None:
        super().connectionMade()
        self._wait(HEADER_TIMEOUT)

    def allHeadersReceived(self) -> None:
        super().allHeadersReceived()
        self._wait(BODY_TIMEOUT)  # allContentReceived follows at once when there is no body

    def rawDataReceived(self, data: bytes) -> None:
        if self._deadline is not None and not self._handlingRequest:
            self._deadline += len(data) / BODY_MIN_RATE
        super().rawDataReceived(data)

    def allContentReceived(self) -> None:
        self._stop()  # the request is complete: the application's time is not the client's
        super().allContentReceived()

    def requestDone(self, request) -> None:
        # Armed before Twisted reads what the client pipelined: a complete request stops it again.
        self._wait(HEADER_TIMEOUT)
        super().requestDone(request)

    def connectionLost(self, reason) -> None:
        self._stop()
        if self._linger_call is not None and self._linger_call.active():
            self._linger_call.cancel()
        super().connectionLost(reason)

    def _wait(self, seconds: float) -> None:
        self._stop()
        self._deadline = reactor.seconds() + seconds
        self._deadline_call = reactor.callLater(seconds, self._check)

    def _stop(self) -> None:
        self._deadline = None
        if self._deadline_call is not None and self._deadline_call.active():
            self._deadline_call.cancel()
        self._deadline_call = None

    def _check(self) -> None:
        self._deadline_call = None
        if self._deadline is None or self.transport is None:
            return
        left = self._deadline - reactor.seconds()
        if left > 0:  # extended by what arrived meanwhile
            self._deadline_call = reactor.callLater(left, self._check)
            return
        self._deadline = None
        if not (self.requests and not self._handlingRequest):  # idle: nothing to answer
            self.timeoutConnection()  # Twisted's: close, and abort if the client does not let go
            return
        # Part of a request arrived: answer 408, close our side, drop the rest, cut later.
        self._linger_call = reactor.callLater(LINGER, self.transport.abortConnection)
        self.transport.write(_REQUEST_TIMEOUT)
        self.transport.loseWriteConnection()


class DeadlineHTTPFactory(http_protocol.HTTPFactory):
    """Daphne's HTTP factory, building `DeadlineChannel`s (HTTP/2 is not enabled in Daphne's
    install here; Twisted's generic wrapper is kept so it still could be)."""

    def protocol(self):  # called as Twisted's `protocol` factory attribute: self.protocol()
        return http._GenericHTTPChannelProtocol(DeadlineChannel())


def install() -> None:
    """Make Daphne's server build `DeadlineHTTPFactory`."""
    daphne.server.HTTPFactory = DeadlineHTTPFactory


def main(argv: list[str] | None = None) -> None:
    from daphne.cli import CommandLineInterface

    install()
    CommandLineInterface().run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
