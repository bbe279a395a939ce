"""A small client for the Weave control plane (``weave serve``), standard library only.

A training loop wraps each phase in the gate::

    client = WeaveClient("http://127.0.0.1:7070", token)
    client.submit({"id": "my-job", "type": "7B_8k", "iterations": 100})
    with client.keepalive("my-job"):
        for k in range(100):
            with client.phase("my-job", "rollout", k) as meta:
                trajectories = generate(weights)          # runs only when Weave says so
                meta["weights_version"] = weights.version
            with client.phase("my-job", "train", k):
                weights = update(weights, trajectories)

``phase`` blocks until the job's turn comes (long-poll), measures the phase and reports it
finished with its duration (and any metadata the body put in ``meta``). A request that would
break the on-policy barrier raises ``WeaveError`` with status 409.

A job submitted with ``"staleness": k`` (bounded off-policy, as AReaL's or veRL's one-step
off-policy) may run rollout n beside trainings n-k .. n-1, e.g. from two threads, one per
lane. Each rollout grant names the weights version to sample with, ``meta.weights`` inside
the ``with`` block (``meta.grant`` is the whole grant); asking for a rollout further ahead
raises ``WeaveError`` 409. ``examples/bandit.py --staleness 1`` is such a job.

On an owned cluster a job may lose its admission while it runs (preempted for another job,
or its node was lost) and wait in the queue again. The gate then raises ``Requeued`` with
``resume_from``, the job's last completed iteration: restore the checkpoint of that iteration
and go on from there; the next ``phase`` waits until the job is admitted again::

    k = 0
    while k < 100:
        try:
            ...  # rollout and training of iteration k, as above
            save_checkpoint(k + 1, weights)
            k += 1
        except Requeued as r:
            k, weights = r.resume_from, load_checkpoint(r.resume_from)

When the server exports traces (``weave serve --otlp-endpoint``), each grant carries the W3C
``traceparent`` of Weave's span for the phase: inside the ``with`` block
``current_traceparent()`` returns it, and if the OpenTelemetry API is installed
(``pip install ./python[otel]``) it is the current context, so a framework's own spans nest
under Weave's phase span.

The gate calls ride out a server restart: when the server cannot be reached they retry for
``retry_s`` seconds (every acknowledged request is durable, so nothing is lost meanwhile).
"""

import contextlib
import contextvars
import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from .transport import KeptAlive, Replicas, WeaveError, answer_error, connect_first_opener

JSON = Any

__all__ = ["PhaseMeta", "Requeued", "WeaveClient", "WeaveError", "current_traceparent"]

_TRACEPARENT: "contextvars.ContextVar[Optional[str]]" = contextvars.ContextVar("weave_traceparent", default=None)


def current_traceparent() -> Optional[str]:
    """The W3C trace context of the Weave phase span around the caller, if tracing is on."""
    return _TRACEPARENT.get()


@contextlib.contextmanager
def _trace_context(traceparent: Optional[str]) -> Iterator[None]:
    """Makes ``traceparent`` current: ours always, OpenTelemetry's when its API is installed."""
    token = _TRACEPARENT.set(traceparent)
    otel_token = None
    if traceparent:
        try:
            from opentelemetry import context as otel_context
            from opentelemetry.propagate import extract
        except ImportError:
            otel_context = None
        if otel_context is not None:
            otel_token = otel_context.attach(extract({"traceparent": traceparent}))
    try:
        yield
    finally:
        if otel_token is not None:
            otel_context.detach(otel_token)
        _TRACEPARENT.reset(token)


class PhaseMeta(dict):
    """What ``WeaveClient.phase`` yields: the phase's metadata to report (a dict), with the
    grant it runs under as ``grant``."""

    def __init__(self, grant: Dict[str, Any]) -> None:
        super().__init__()
        self.grant = grant

    @property
    def weights(self) -> Optional[int]:
        """A rollout's weights version: the number of trainings whose weights it samples with
        (its iteration on-policy; up to ``staleness`` fewer for a bounded-staleness job)."""
        w = self.grant.get("weights")
        return None if w is None else int(w)

    @property
    def environment(self) -> Optional[Dict[str, Any]]:
        """An agentic job's sandboxes: with a rollout, how many it may hold (``sandboxes``, each
        ``sandbox``: cores, mem_gib, pausable); with a training, ``start_sandboxes_for`` names
        the next rollout whose sandboxes to start now (the plan it was admitted under assumes
        they start during the training). ``None`` for a job that declared no ``agentic``."""
        return self.grant.get("environment")

    def report_environment(self, trajectories: int, turns: int, env_s: float, startup_s: float = 0.0) -> None:
        """Reports what a rollout's environments did, sent with its finish (``meta.agentic``):
        its trajectories, all their turns, the seconds their environment steps took and their
        sandboxes' starts took (each summed). The job view shows the medians of recent reports
        beside what the job declared."""
        self["agentic"] = {"trajectories": int(trajectories), "turns": int(turns), "env_s": float(env_s),
                           "startup_s": float(startup_s)}


class Requeued(WeaveError):
    """The job's admission ended while it ran (preempted, moved by consolidation, or its node
    was lost) and it waits in the queue again or was re-admitted elsewhere; it resumes from
    iteration ``resume_from`` (its last completed one)."""

    def __init__(self, job_id: str, resume_from: int, reason: str) -> None:
        super().__init__(409, f"job {job_id} was re-queued ({reason}); it resumes from iteration {resume_from}")
        self.job_id = job_id
        self.resume_from = resume_from
        self.reason = reason


def _next_page(headers: Dict[str, str]) -> Optional[str]:
    """The path of the next page a ``Link: <PATH>; rel="next"`` header names, if any."""
    for name, value in headers.items():
        if name.lower() == "link" and 'rel="next"' in value and value.startswith("<"):
            return value[1 : value.index(">")]
    return None


class WeaveClient:
    def __init__(self, server: str, token: Optional[str] = None, timeout: float = 40.0, retry_s: float = 60.0,
                 keep_alive: bool = False) -> None:
        """``keep_alive``: reuse one connection per thread for requests a second or less apart
        (a driver's phase requests follow each other within milliseconds: each then costs a
        third of a millisecond instead of one and a half). Off by default: each request opens
        its own connection, honouring ``http_proxy`` as urllib does."""
        self._replicas = Replicas(server)
        self.token = token
        self.timeout = timeout
        self.retry_s = retry_s
        self._kept = {u: KeptAlive(u, timeout) for u in self._replicas.urls} if keep_alive else None
        # Several replicas: a connection is given up sooner than an answer (see CONNECT_S).
        self._open = connect_first_opener().open if self._replicas.several() else urllib.request.urlopen
        # The admission (``uid``) each job's last grant belonged to: a refusal after that
        # admission ended means the job was re-queued, even if it has been re-admitted since.
        self._admission: Dict[str, int] = {}

    @property
    def server(self) -> str:
        """The address requests go to now (one of the replicas given, if several)."""
        return self._replicas.url

    def _request(
        self, method: str, path: str, body: JSON = None, retry: bool = False, headers_out: Optional[Dict[str, str]] = None
    ) -> Tuple[int, JSON]:
        """One request; with ``retry``, connection failures and 503 answers (server down,
        restarting, replaying its store, or its disk refusing writes) are retried for
        ``retry_s`` seconds. A 429 (this token's rate limit) is always retried, after the
        ``Retry-After`` the server gives: a limited request changed nothing. Other HTTP errors
        are never retried. ``headers_out``, if given, receives the answer's headers."""
        deadline = time.monotonic() + self.retry_s
        while True:
            wait = 0.5
            try:
                return self._request_once(method, path, body, headers_out)
            except (WeaveError, urllib.error.URLError, ConnectionError) as e:
                # Another replica may serve what this one did not take (nothing happened here).
                if self._replicas.several() and self._replicas.unserved(e) and time.monotonic() < deadline:
                    self._replicas.next()
                    time.sleep(0.1)
                    continue
                if isinstance(e, WeaveError):
                    retried = e.status == 429 or (e.status == 503 and retry)
                    if not retried or time.monotonic() > deadline:
                        raise
                    wait = e.retry_after if e.retry_after is not None else wait
                elif isinstance(e, urllib.error.HTTPError) or not retry or time.monotonic() > deadline:
                    raise
            except TimeoutError:
                if not retry or time.monotonic() > deadline:
                    raise
            time.sleep(max(0.0, min(wait, deadline - time.monotonic())))

    def _request_once(
        self, method: str, path: str, body: JSON = None, headers_out: Optional[Dict[str, str]] = None
    ) -> Tuple[int, JSON]:
        data = None if body is None else json.dumps(body).encode()
        if self._kept is not None:
            return self._kept[self.server].request(method, path, data, self.token, headers_out)
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with self._open(req, timeout=self.timeout) as resp:
                raw = resp.read()
                if headers_out is not None:
                    headers_out.update(resp.headers.items())
                return resp.status, (json.loads(raw) if raw else None)
        except urllib.error.HTTPError as e:
            raise answer_error(e.code, e.read(), e.headers.get("Retry-After", "")) from None

    def submit(self, spec: Dict[str, Any]) -> JSON:
        """Submits a job (the trace format's fields, without arrival); returns the decision."""
        return self._request("POST", "/v1/jobs", spec)[1]

    def job(self, job_id: str) -> JSON:
        return self._request("GET", f"/v1/jobs/{job_id}")[1]

    def jobs(self) -> List[JSON]:
        """Every job this token may see, page by page (the server answers at most a page, and
        names the next in its ``Link`` header)."""
        out: List[JSON] = []
        path: Optional[str] = "/v1/jobs"
        while path is not None:
            headers: Dict[str, str] = {}
            out.extend(self._request("GET", path, headers_out=headers)[1])
            path = _next_page(headers)
        return out

    def queue(self) -> List[JSON]:
        """Jobs waiting for room in fixed pools, in the order they will start."""
        return self._request("GET", "/v1/queue")[1]

    def cancel(self, job_id: str) -> JSON:
        return self._request("DELETE", f"/v1/jobs/{job_id}")[1]

    def restart(self, job_id: str, reason: str) -> JSON:
        """Work in flight was lost (a process of the job died): Weave ends this admission and
        re-admits the job from its last completed iteration, so the lost phase runs again."""
        return self._request("POST", f"/v1/jobs/{job_id}/restart", {"reason": reason})[1]

    def return_loan(self, job_id: str, uid: Optional[int] = None) -> JSON:
        """The job's requests are off the rollout nodes lent to it (``weave serve --lending``):
        the loan ends. ``uid``: the admission the loan was made to (the grant's)."""
        body: JSON = {} if uid is None else {"uid": uid}
        return self._request("POST", f"/v1/jobs/{job_id}/loan/return", body)[1]

    def events(self, after: Optional[int] = None, limit: Optional[int] = None) -> List[JSON]:
        """Events this token may see; ``after`` (the last ``seq`` seen) and ``limit`` page them.
        Without ``limit``, every event the server holds after ``after`` (page by page)."""
        if limit is not None:
            query = "&".join(f"{k}={v}" for k, v in (("after", after), ("limit", limit)) if v is not None)
            return self._request("GET", f"/v1/events?{query}")[1]
        out: List[JSON] = []
        while True:
            page = self.events(after, 10_000)
            if not page:
                return out
            out.extend(page)
            after = page[-1]["seq"]

    def node_down(self, node: str, reason: Optional[str] = None) -> JSON:
        """Takes ``node`` (e.g. ``"r0"``) out of service (admin; fixed pools): its jobs fail
        and are re-admitted from their last completed iteration, or wait in the queue."""
        return self._request("POST", f"/v1/nodes/{node}/down", {"reason": reason} if reason else {})[1]

    def node_notice(self, node: str, seconds: int, reason: Optional[str] = None) -> JSON:
        """A preemption notice for ``node`` (admin; fixed pools): it closes to new placements
        now, its jobs' tenants see ``preemption-notice`` events with the deadline, and after
        ``seconds`` the server takes it out of service as a lost node."""
        body: Dict[str, Any] = {"seconds": seconds}
        if reason:
            body["reason"] = reason
        return self._request("POST", f"/v1/nodes/{node}/notice", body)[1]

    def node_up(self, node: str) -> JSON:
        """Puts ``node`` back in service (admin): queued jobs start where it makes room."""
        return self._request("POST", f"/v1/nodes/{node}/up")[1]

    def heartbeat(self, job_id: str) -> JSON:
        return self._request("POST", f"/v1/jobs/{job_id}/heartbeat", retry=True)[1]

    def _requeued(self, job_id: str, e: WeaveError) -> WeaveError:
        """``Requeued`` if a 409 came because the admission this driver ran under ended (the
        job waits in the queue again, or was already re-admitted as a new one), else ``e``."""
        if e.status != 409:
            return e
        answer = self._request("GET", f"/v1/jobs/{job_id}", retry=True)[1]
        view = answer["job"]
        ours = self._admission.get(job_id)
        if view["state"] != "queued" and (ours is None or view.get("uid") == ours):
            return e
        self._admission.pop(job_id, None)
        ended = [h for h in answer.get("history", []) if h["kind"] in ("preempted", "failed", "moved")]
        last = ended[-1] if ended else None
        reason = ((last.get("meta") or {}).get("reason") or last["kind"]) if last else view.get("queue_reason", "")
        resume = view.get("completed_iterations", int(view["next"].split()[1]))
        return Requeued(job_id, int(resume), reason)

    def start(self, job_id: str, phase: str, iteration: int, wait_s: float = 25.0) -> JSON:
        """Blocks until ``phase`` of ``iteration`` is granted; raises ``Requeued`` if the job
        waits in the queue again and must resume from an earlier iteration."""
        while True:
            granted = self.try_start(job_id, phase, iteration, wait_s)
            if granted is not None:
                return granted

    def try_start(self, job_id: str, phase: str, iteration: int, wait_s: float = 25.0) -> Optional[JSON]:
        """Like ``start``, but gives up after ``wait_s`` seconds: the grant, or ``None`` if
        not yet (a driver with two lanes polls so it can stop a lane in between)."""
        try:
            status, body = self._request(
                "POST", f"/v1/jobs/{job_id}/phases/{phase}/{iteration}/start?wait_s={wait_s}", retry=True
            )
        except WeaveError as e:
            raise self._requeued(job_id, e) from None
        if status != 200:
            return None
        if "uid" in body:
            before, now = self._admission.get(job_id), int(body["uid"])
            self._admission[job_id] = now
            if before is not None and before != now:
                # A new admission since this driver's last grant. A consolidation move takes
                # effect between phases (after the training in flight finished), so no report
                # was refused: the job runs elsewhere now, and the driver restores the iteration
                # the new admission starts from (the one it asked for) and asks again; the grant
                # is kept for it.
                view = self._request("GET", f"/v1/jobs/{job_id}", retry=True)[1]
                ended = [h for h in view.get("history", []) if h["kind"] in ("moved", "preempted", "failed")]
                if ended and ended[-1]["kind"] == "moved":
                    raise Requeued(job_id, int(view["job"].get("completed_iterations", iteration)), "moved")
        return body

    def finish(
        self, job_id: str, phase: str, iteration: int, duration_s: float, meta: Optional[Dict[str, Any]] = None
    ) -> JSON:
        body: Dict[str, Any] = {"duration_s": float(duration_s)}
        if meta:
            body["meta"] = meta
        if job_id in self._admission:
            # The server refuses the finish if this admission has ended in the meantime.
            body["uid"] = self._admission[job_id]
        path = f"/v1/jobs/{job_id}/phases/{phase}/{iteration}/finish"
        try:
            return self._request("POST", path, body)[1]
        except WeaveError as e:
            # 503: the server is replaying its store or its disk refused the write; the
            # finish was not acknowledged, so it is retried like a lost connection.
            if e.status != 503:
                raise self._requeued(job_id, e) from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
            if isinstance(e, urllib.error.HTTPError):
                raise
        # The server went away mid-request or could not record it: the finish may or may not
        # have been recorded. Retry; a 409 then means it was (the job's next phase has moved
        # past this one).
        try:
            return self._request("POST", path, body, retry=True)[1]
        except WeaveError as e:
            view = self._request("GET", f"/v1/jobs/{job_id}", retry=True)[1]["job"]
            done = {"rollout": f"train {iteration}", "train": f"rollout {iteration + 1}"}[phase]
            # A bounded-staleness job's rollout lane runs ahead: its own counter tells.
            rolled = phase == "rollout" and view.get("next_rollout", -1) > iteration
            if e.status == 409 and (view["next"] == done or view["completed_iterations"] > iteration or rolled):
                return view
            raise self._requeued(job_id, e) from None

    @contextlib.contextmanager
    def phase(
        self, job_id: str, phase: str, iteration: int, granted: Optional[JSON] = None
    ) -> Iterator[PhaseMeta]:
        """Waits for the gate (unless ``granted``, a grant ``try_start`` returned), runs the
        body, reports the measured duration. The body may add entries to the yielded dict;
        they are sent as the phase's metadata. Its ``weights`` is a rollout's weights version."""
        if granted is None:
            granted = self.start(job_id, phase, iteration)
        meta = PhaseMeta(granted)
        t0 = time.monotonic()
        with _trace_context(granted.get("traceparent")):
            yield meta
        self.finish(job_id, phase, iteration, time.monotonic() - t0, meta)

    @contextlib.contextmanager
    def keepalive(
        self,
        job_id: str,
        interval_s: float = 2.0,
        on_notice: Optional[Callable[[JSON], None]] = None,
        on_loan: Optional[Callable[[JSON], None]] = None,
    ) -> Iterator[None]:
        """Sends heartbeats from a background thread while the body runs. A heartbeat's answer
        names a preemption notice on one of the job's nodes (node, deadline): ``on_notice`` is
        called with it each time, so a driver mid-phase can move its work off the node. With
        ``weave serve --lending`` it names the rollout nodes lent to the job's rollout (nodes,
        ``load_in_s``, ``reclaim_in_s``): ``on_loan`` is called with it each time (a deadline
        brought forward, because the lender needs its nodes, is heard this way)."""
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(interval_s):
                try:
                    answer = self.heartbeat(job_id)
                except (WeaveError, OSError):
                    continue
                notice = answer.get("preemption_notice") if isinstance(answer, dict) else None
                if notice and on_notice is not None:
                    on_notice(notice)
                loan = answer.get("loan") if isinstance(answer, dict) else None
                if loan and on_loan is not None:
                    on_loan(loan)

        t = threading.Thread(target=beat, daemon=True)
        t.start()
        try:
            yield
        finally:
            stop.set()
            t.join()
