"""How the client talks HTTP: the server's error answers as ``WeaveError``, a kept-alive
connection per thread (``WeaveClient(keep_alive=True)``) for drivers whose phase requests
follow each other within milliseconds, and the replicas of a replicated server
(``WeaveClient("http://a:8080,http://b:8080")``): requests go to the one that serves."""

import http.client
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Optional, Tuple

# A kept-alive connection idle longer than this is not reused: the server may have closed it,
# and a request sent on a closed connection cannot tell whether it was received.
KEEP_ALIVE_IDLE_S = 1.0

# A replica whose machine is gone answers no connection at all (no refusal either): a
# connection is waited for this long (or the client's timeout, if shorter) before the next
# replica is tried. Answers are waited for as long as the client's timeout.
CONNECT_S = 2.0


class NotConnected(ConnectionError):
    """No connection could be made to the server: the request was not sent."""


class ConnectFirst(http.client.HTTPConnection):
    """An HTTP connection that gives up connecting after ``CONNECT_S``."""

    def connect(self) -> None:
        timeout = self.timeout
        if isinstance(timeout, (int, float)):
            self.timeout = min(CONNECT_S, timeout)
        try:
            super().connect()
        finally:
            self.timeout = timeout
        if isinstance(timeout, (int, float)):
            self.sock.settimeout(timeout)


class _ConnectFirstHandler(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(ConnectFirst, req)


def connect_first_opener() -> urllib.request.OpenerDirector:
    """urllib's opener (proxies as usual) with :class:`ConnectFirst` for plain HTTP."""
    return urllib.request.build_opener(_ConnectFirstHandler)


class WeaveError(Exception):
    """The server refused a request; ``status`` is the HTTP status, ``retry_after`` the
    seconds its ``Retry-After`` asked to wait (429 and 503), if any."""

    def __init__(self, status: int, message: str, retry_after: Optional[float] = None) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.retry_after = retry_after


def answer_error(status: int, raw: bytes, retry_after_header: Optional[str]) -> WeaveError:
    """The error an HTTP error answer stands for: the server's message, its Retry-After."""
    try:
        message = json.loads(raw).get("error", raw.decode(errors="replace"))
    except (ValueError, AttributeError):
        message = raw.decode(errors="replace")
    try:
        retry_after: Optional[float] = float(retry_after_header or "")
    except ValueError:
        retry_after = None
    return WeaveError(status, message, retry_after)


class KeptAlive:
    """One connection per thread to ``server``, reused for requests at most
    ``KEEP_ALIVE_IDLE_S`` apart. A failed connection is reported as ``ConnectionError`` (as
    urllib reports one), so the client's retries treat both transports alike."""

    def __init__(self, server: str, timeout: float) -> None:
        self.url = urllib.parse.urlsplit(server)
        self.timeout = timeout
        self.local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        held = getattr(self.local, "held", None)
        if held is not None and time.monotonic() - held[1] > KEEP_ALIVE_IDLE_S:
            held[0].close()
            held = None
        if held is None:
            https = self.url.scheme == "https"
            cls = http.client.HTTPSConnection if https else ConnectFirst
            return cls(self.url.netloc, timeout=self.timeout)
        return held[0]

    def request(self, method: str, path: str, data: Optional[bytes], token: Optional[str],
                headers_out: Optional[Dict[str, str]]) -> Tuple[int, Any]:
        conn = self._connection()
        if conn.sock is None:
            try:
                conn.connect()
            except OSError as e:
                conn.close()
                self.local.held = None
                raise NotConnected(f"{self.url.geturl()}: {e!r}") from None
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            conn.request(method, self.url.path + path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        except (http.client.HTTPException, OSError) as e:
            conn.close()
            self.local.held = None
            raise ConnectionError(f"{self.url.geturl()}: {e!r}") from None
        self.local.held = (conn, time.monotonic())
        if headers_out is not None:
            headers_out.update(resp.getheaders())
        if resp.status >= 400:
            raise answer_error(resp.status, raw, resp.getheader("Retry-After"))
        return resp.status, (json.loads(raw) if raw else None)


class Replicas:
    """The addresses of one server's replicas (``weave serve --etcd``), comma-separated; the
    one requests go to now. A replica that takes no connection (refused, or its machine gone),
    answers 503 as a standby or while it opens, or 503 because the replicated log did not take
    the write (etcd out of reach), has done nothing with the request: the next one is tried."""

    def __init__(self, servers: str) -> None:
        self.urls = [s.strip().rstrip("/") for s in servers.split(",") if s.strip()]
        if not self.urls:
            raise ValueError("no server address given")
        self.current = 0

    @property
    def url(self) -> str:
        return self.urls[self.current]

    def several(self) -> bool:
        return len(self.urls) > 1

    def unserved(self, e: BaseException) -> bool:
        """Whether ``e`` says the replica did not take the request (so another may)."""
        if isinstance(e, WeaveError):
            return e.status == 503 and e.message.startswith(("standby", "recovering", "the replicated log"))
        if isinstance(e, NotConnected):
            return True
        # urllib wraps in URLError only what failed while connecting or sending (never an
        # error while the answer was awaited): the request was not taken.
        if isinstance(e, urllib.error.URLError) and not isinstance(e, urllib.error.HTTPError):
            return isinstance(e.reason, OSError)
        refused = isinstance(e, ConnectionRefusedError) or "Connection refused" in str(e)
        return refused or isinstance(getattr(e, "reason", None), ConnectionRefusedError)

    def next(self) -> None:
        self.current = (self.current + 1) % len(self.urls)
