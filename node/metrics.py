"""Prometheus metrics of the node and of the provider worker (prometheus_client).

The node (``loconet start``) serves its own ``/metrics`` beside CometBFT's (which
``node/local/config.py`` turns on at ``prometheus_listen_addr``, port 26660 + 100·i in a local
testnet): ``metrics_address`` in ``app.toml``, default the CometBFT metrics port + 1 (26661 +
100·i), ``""`` to turn it off; a port in use turns them off with a warning (the node runs on).
The state machine stays free of clocks and I/O: the node wraps
the Application (``MeteredApplication``) and measures around the ABCI calls.

    loconet_block_execution_seconds       histogram  FinalizeBlock wall time
    loconet_blocks_total                  counter    blocks finalized
    loconet_commits_total                 counter    blocks committed
    loconet_height                        gauge      last committed height
    loconet_txs_total{stage,codespace,code}  counter txs by result: stage check (CheckTx of a
                                                     new tx), recheck (CometBFT re-checking its
                                                     mempool after a block: a non-zero code
                                                     evicts the tx) or block (FinalizeBlock);
                                                     code 0 = accepted
    loconet_events_total{type}            counter    every event the blocks and txs emitted
    loconet_rounds{job,phase}             gauge      open rounds by job and phase (committed state)
    loconet_verdicts_total{outcome}       counter    decided verdicts (verdict.decided)
    loconet_slashes_total{kind}           counter    slashes: validator.slashed, provider
                                                     slashes and jailings (event type)
    loconet_slashed_uloco_total{kind}     counter    uloco slashed, by kind

Per provider (committed state, refreshed at every commit; what an operator alerts on):

    loconet_provider_reputation{provider}        gauge  reputation, of 10000
    loconet_provider_bond_uloco{provider}        gauge  bonded stake
    loconet_provider_jailed{provider}            gauge  1 while jailed
    loconet_provider_earned_uloco{provider}      gauge  lifetime earnings (training, verifying,
                                                        bounties: the SLA record)
    loconet_provider_slashed_uloco{provider}     gauge  lifetime slashes
    loconet_provider_uptime_bps{provider}        gauge  duties kept over its last 64, of 10000
    loconet_provider_missed_duties{provider,duty}  gauge  duties due and not kept: commit,
                                                        reveal, attest, vote (the SLA record)
    loconet_provider_next_duty_blocks{provider,duty}  gauge  blocks until the deadline of its
                                                        nearest duty not yet done in an open
                                                        round (no series: nothing due)
    loconet_provider_next_duty_seconds{provider,duty} gauge  the same at the mean block time
                                                        of the last 20 blocks

The worker's (``WorkerMetrics``, for ``loconet provider run`` and node/blobs):

    loconet_blob_bytes_total{direction}   counter    blob bytes in (fetched) / out (served)
    loconet_training_loss{job}            gauge      last inner-step loss (nats)
    loconet_training_round{job}           gauge      the round last trained
    loconet_training_round_steps{job}     gauge      its inner steps
    loconet_training_round_seconds{job}   gauge      its training wall time
    loconet_training_step_seconds         histogram  time of one inner step
    loconet_training_steps_total          counter    inner steps done
    loconet_rounds_done_total{result}     counter    provider rounds: committed / failed

No ``*_created`` series: ``disable_created_metrics()`` at import (prometheus_client exported a
creation timestamp beside every counter and histogram, twice the series and nothing to alert
on). Every metric lives in a ``CollectorRegistry`` passed in (tests make their own); ``serve``
starts the HTTP endpoint on a daemon thread. A Grafana dashboard over both is in
``networks/grafana/loconet.json``.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    make_wsgi_app,
)

from abci_app.app import Application
from abci_app.codec.address import to_bech32
from abci_app.encoding import prefix_end
from abci_app.jobs import sla
from abci_app.jobs.keeper import get_round
from abci_app.jobs.keys import ROUND_DUE_PREFIX, parse_round_due_key
from abci_app.pb import abci, jobs_pb2, providers_pb2
from abci_app.providers.keeper import iterate_providers

RECHECK = abci.CheckTxType.Value("RECHECK")  # CometBFT re-checking its mempool after a block

BLOCK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
SLASH_EVENTS = (
    "validator.slashed",
    "provider.slashed",
    "provider.jailed",
    "validator.jailed",
    "validator.tombstoned",
)


log = logging.getLogger("loconet.metrics")

disable_created_metrics()  # no `*_created` series (module docstring)


def parse_listen(address: str) -> tuple[str, int]:
    """``127.0.0.1:26661`` / ``:26661`` / ``tcp://0.0.0.0:26661`` -> (host, port)."""
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not (port.isascii() and port.isdigit() and int(port) < 65536):
        raise ValueError(
            f"metrics address {address!r}: write HOST:PORT with a port in 0..65535 (0: any free "
            "port), e.g. 127.0.0.1:26661"
        )
    return host or "127.0.0.1", int(port)


CLIENT_TIMEOUT_S = 10.0  # a scrape client that sends nothing for this long is dropped
REQUEST_DEADLINE_S = 30.0  # and one still connected this long after it opened (a dripping one)
MAX_SCRAPERS = 32  # connections served at once (a thread each); more are closed at once


class _ScrapeHandler(WSGIRequestHandler):
    """A scrape connection: ``timeout`` (seconds of silence per read) and ``deadline_s`` (since
    it opened) are set per server by ``_handler_class``; access lines are not logged."""

    deadline_s = REQUEST_DEADLINE_S

    def setup(self) -> None:
        super().setup()
        # the timeout is per read: a client dripping a byte every few seconds held its thread
        # for ever; past the deadline its socket is shut, whatever it sends
        self._deadline = threading.Timer(self.deadline_s, self._expire)
        self._deadline.daemon = True
        self._deadline.start()

    def _expire(self) -> None:
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def finish(self) -> None:
        self._deadline.cancel()
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _handler_class(idle: float, deadline: float) -> type[_ScrapeHandler]:
    class Handler(_ScrapeHandler):
        timeout = idle
        deadline_s = deadline

    return Handler


class _ScrapeServer(socketserver.ThreadingMixIn, WSGIServer):
    """A thread per connection, at most ``slots`` at once (set per server by ``_server_class``):
    a flood of connections gets no thread each."""

    daemon_threads = True
    slots: threading.BoundedSemaphore

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):  # a flood of connections: no thread each
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver's default prints a 15-line traceback to stderr. Any OSError here was
        # raised by the socket under the request's parsing or the answer's writing: the
        # client was idle past the timeout (TimeoutError), dripped past the deadline (the
        # shut socket then breaks the 400's write), reset or left. Its doing: one line. An
        # error in the exposition app itself is wsgiref's to report (a 500); anything else
        # reaching here is ours, with its traceback.
        e = sys.exc_info()[1]
        peer = client_address[0] if isinstance(client_address, tuple) else client_address
        if isinstance(e, OSError):
            why = "idle past the timeout" if isinstance(e, TimeoutError) else "mid-request"
            log.info(
                "metrics client %s dropped %s (%s: %s)",
                peer,
                why,
                type(e).__name__,
                " ".join(str(e).split())[:200],
            )
            return
        log.error("metrics: error serving %s", peer, exc_info=e)


def _server_class(host: str, max_scrapers: int) -> type[_ScrapeServer]:
    class Server(_ScrapeServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        slots = threading.BoundedSemaphore(max_scrapers)

    return Server


def _only_metrics(exposition: Any) -> Any:
    """The exposition app answering / and /metrics only: prometheus_client answers 200 with
    every metric on any path (/x, /%ff, /favicon.ico empty); anything else is a 404 saying
    where."""

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO", "/") not in ("/", "/metrics"):
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"not found: the metrics are at /metrics\n"]
        return exposition(environ, start_response)

    return app


def serve(
    registry: CollectorRegistry,
    address: str,
    *,
    client_timeout_s: float | None = None,
    deadline_s: float | None = None,
) -> tuple[Any, Any]:
    """Serve ``registry`` at http://address/metrics on a daemon thread; returns (server, thread).
    prometheus_client's exposition app behind a threaded wsgiref server whose connections time out
    after ``client_timeout_s`` (CLIENT_TIMEOUT_S) of silence and are shut ``deadline_s``
    (REQUEST_DEADLINE_S) after they opened (``start_http_server`` has no timeout: every slowloris
    connection held a thread for ever). A client that times out, resets, or leaves mid-request
    is one INFO line on ``loconet.metrics`` (socketserver printed a traceback to stderr for each,
    e.g. every idle connection's ``TimeoutError``); an error of the server's own is logged with
    its traceback."""
    host, port = parse_listen(address)
    deadline = REQUEST_DEADLINE_S if deadline_s is None else deadline_s
    idle = CLIENT_TIMEOUT_S if client_timeout_s is None else client_timeout_s
    httpd = make_server(
        host.strip("[]"),
        port,
        _only_metrics(make_wsgi_app(registry)),
        _server_class(host, MAX_SCRAPERS),
        handler_class=_handler_class(idle, deadline),
    )
    t = threading.Thread(target=httpd.serve_forever, name="metrics", daemon=True)
    t.start()
    return httpd, t


class NodeMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.block_seconds = Histogram(
            "loconet_block_execution_seconds",
            "FinalizeBlock wall time",
            buckets=BLOCK_BUCKETS,
            registry=registry,
        )
        self.blocks = Counter("loconet_blocks", "blocks finalized", registry=registry)
        self.commits = Counter("loconet_commits", "blocks committed", registry=registry)
        self.height = Gauge("loconet_height", "last committed height", registry=registry)
        self.txs = Counter(
            "loconet_txs",
            "txs by result (code 0 = accepted)",
            ["stage", "codespace", "code"],
            registry=registry,
        )
        self.events = Counter(
            "loconet_events", "events emitted by blocks and txs", ["type"], registry=registry
        )
        self.rounds = Gauge(
            "loconet_rounds", "open rounds by job and phase", ["job", "phase"], registry=registry
        )
        self.verdicts = Counter(
            "loconet_verdicts", "decided verdicts by outcome", ["outcome"], registry=registry
        )
        self.slashes = Counter(
            "loconet_slashes", "slashes and jailings by kind", ["kind"], registry=registry
        )
        self.slashed = Counter(
            "loconet_slashed_uloco", "uloco slashed by kind", ["kind"], registry=registry
        )

        def per_provider(name: str, doc: str, *labels: str) -> Gauge:
            return Gauge(name, doc, ["provider", *labels], registry=registry)

        self.p_reputation = per_provider("loconet_provider_reputation", "reputation, of 10000")
        self.p_bond = per_provider("loconet_provider_bond_uloco", "bonded stake (uloco)")
        self.p_jailed = per_provider("loconet_provider_jailed", "1 while jailed")
        self.p_earned = per_provider("loconet_provider_earned_uloco", "lifetime earnings (uloco)")
        self.p_slashed = per_provider("loconet_provider_slashed_uloco", "lifetime slashes (uloco)")
        self.p_uptime = per_provider("loconet_provider_uptime_bps", "duties kept of its last 64")
        self.p_missed = per_provider(
            "loconet_provider_missed_duties", "duties due and not kept", "duty"
        )
        self.p_next_blocks = per_provider(
            "loconet_provider_next_duty_blocks",
            "blocks to the deadline of its nearest duty not done in an open round",
            "duty",
        )
        self.p_next_seconds = per_provider(
            "loconet_provider_next_duty_seconds",
            "seconds to that deadline at the mean block time of the last 20 blocks",
            "duty",
        )

    def observe_events(self, events: Any) -> None:
        counts: dict[str, int] = {}
        for e in events:  # one labelled increment per event type, not per event (per-tx cost)
            counts[e.type] = counts.get(e.type, 0) + 1
            if e.type != "verdict.decided" and e.type not in SLASH_EVENTS and "slash" not in e.type:
                continue
            attrs = {a.key: a.value for a in e.attributes}
            if e.type == "verdict.decided":
                self.verdicts.labels(attrs.get("outcome", "?")).inc()
            if e.type in SLASH_EVENTS or "slash" in e.type:
                self.slashes.labels(e.type).inc()
                amount = attrs.get("amount") or attrs.get("slashed") or ""
                if amount.isdigit():
                    self.slashed.labels(e.type).inc(int(amount))
        for kind, n in counts.items():
            self.events.labels(kind).inc(n)


@contextlib.contextmanager
def _never_fatal(where: str) -> Iterator[None]:
    """Measuring runs on the consensus path, after the app has answered: a metrics bug (an
    event attribute that is not what it expects, say) is logged and the block goes on; an
    exception here would reach the ABCI server as a FinalizeBlock/Commit failure and halt the
    node."""
    try:
        yield
    except Exception:
        log.exception("metrics after %s failed (the node goes on)", where)


class MeteredApplication(Application):
    """The Application with ``NodeMetrics`` measured around FinalizeBlock, CheckTx and Commit
    (results unchanged: the wrapped calls return exactly what the app returns)."""

    def __init__(self, *args: Any, metrics: NodeMetrics, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.metrics = metrics
        self._check_counters: dict[tuple[str, str, int], Any] = {}
        self._block_times: list[float] = []  # header times (s) of the last blocks finalized

    def check_tx(self, req: Any) -> Any:
        res = super().check_tx(req)
        with _never_fatal("check_tx"):
            key = ("recheck" if req.type == RECHECK else "check", res.codespace, res.code)
            child = self._check_counters.get(key)
            if child is None:  # the labelled child, looked up once per (stage, code)
                child = self._check_counters[key] = self.metrics.txs.labels(
                    key[0], key[1], str(key[2])
                )
            child.inc()
        return res

    def finalize_block(self, req: Any) -> Any:
        t0 = time.perf_counter()
        res = super().finalize_block(req)
        with _never_fatal("finalize_block"):
            m = self.metrics
            m.block_seconds.observe(time.perf_counter() - t0)
            m.blocks.inc()
            if req.HasField("time"):
                self._block_times = [*self._block_times[-20:], req.time.ToNanoseconds() / 1e9]
            codes: dict[tuple[str, int], int] = {}
            events = list(res.events)
            for r in res.tx_results:  # counted first, then one labelled increment per code
                codes[(r.codespace, r.code)] = codes.get((r.codespace, r.code), 0) + 1
                events.extend(r.events)
            for (codespace, code), n in codes.items():
                m.txs.labels("block", codespace, str(code)).inc(n)
            m.observe_events(events)
        return res

    def commit(self, req: Any) -> Any:
        res = super().commit(req)
        with _never_fatal("commit"):
            self.metrics.commits.inc()
            self.metrics.height.set(self.store.height)
            due = self._count_rounds()
            self._provider_gauges(due)
        return res

    def _count_rounds(self) -> dict[tuple[bytes, str], int]:
        """Open rounds by job and phase, from the round schedule index (only rounds not
        finalized); returns each provider's nearest pending duty deadline, (address, duty) ->
        height, read from the same rounds."""
        counts: dict[tuple[str, str], int] = {}
        due: dict[tuple[bytes, str], int] = {}
        seen: set[tuple[int, int]] = set()
        for key, _ in self.store.iterate(ROUND_DUE_PREFIX, prefix_end(ROUND_DUE_PREFIX)):
            _, job_id, rnd = parse_round_due_key(key)
            if (job_id, rnd) in seen:
                continue
            seen.add((job_id, rnd))
            r = get_round(self.store, job_id, rnd)
            if r is not None:
                label = (str(job_id), PHASES.get(r.phase, str(r.phase)))
                counts[label] = counts.get(label, 0) + 1
                for (addr, duty), h in pending_duties(r).items():
                    if h < due.get((addr, duty), 1 << 63):
                        due[(addr, duty)] = h
        self.metrics.rounds.clear()  # a finished job's series leave, not stay at their last value
        for (job, phase), n in counts.items():
            self.metrics.rounds.labels(job, phase).set(n)
        return due

    def _provider_gauges(self, due: dict[tuple[bytes, str], int]) -> None:
        """Every registered provider's figures from the committed state (module docstring)."""
        m, h = self.metrics, self.store.height
        bt = self._block_times
        block_s = (bt[-1] - bt[0]) / (len(bt) - 1) if len(bt) > 1 else 0.0
        for g in (m.p_reputation, m.p_bond, m.p_jailed, m.p_earned, m.p_slashed, m.p_uptime):
            g.clear()
        for g in (m.p_missed, m.p_next_blocks, m.p_next_seconds):
            g.clear()
        for i, p in enumerate(iterate_providers(self.store)):
            if i >= MAX_PROVIDER_SERIES:
                break
            a = to_bech32(p.address)
            s = sla.get_sla(self.store, p.address)
            m.p_reputation.labels(a).set(p.reputation)
            m.p_bond.labels(a).set(p.bond)
            m.p_jailed.labels(a).set(1 if p.status == JAILED else 0)
            m.p_earned.labels(a).set(s.earned_participant + s.earned_verifier + s.earned_bounty)
            m.p_slashed.labels(a).set(p.slashed_total)
            m.p_uptime.labels(a).set(sla.compute_uptime_bps(s))
            for duty, n in (
                ("commit", s.commits_due - s.committed_on_time),
                ("reveal", s.reveals_due - s.revealed),
                ("attest", s.attests_due - s.attested),
                ("vote", s.verifier_assigned - s.verifier_voted),
            ):
                m.p_missed.labels(a, duty).set(max(n, 0))
        for (addr, duty), deadline in due.items():
            a = to_bech32(addr)
            left = max(deadline - h, 0)
            m.p_next_blocks.labels(a, duty).set(left)
            m.p_next_seconds.labels(a, duty).set(round(left * block_s, 3))


MAX_PROVIDER_SERIES = 1000  # per-provider gauges for at most this many providers


PHASES = {v: k.removeprefix("PHASE_").lower() for k, v in jobs_pb2.Phase.items()}
JAILED = int(providers_pb2.ProviderStatus.Value("PROVIDER_STATUS_JAILED"))


def pending_duties(r: Any) -> dict[tuple[bytes, str], int]:
    """(address, duty) -> the last height of its window, for each duty of an open round (a
    ``jobs_pb2.Round``) not done yet: a drawn participant's commit, a challenged one's reveal, an
    assigned verifier's vote (its hash, then its opening), an accepted one's attestation."""
    out: dict[tuple[bytes, str], int] = {}
    for p in r.participants:
        if r.phase in (jobs_pb2.PHASE_OPEN, jobs_pb2.PHASE_COMMIT) and not p.HasField("commitment"):
            if p.outcome == jobs_pb2.OUTCOME_PENDING:
                out[(p.address, "commit")] = r.commit_deadline
        if (
            r.phase == jobs_pb2.PHASE_REVEAL
            and p.challenged
            and len(p.reveals) < max(1, len(p.segments))
        ):
            out[(p.address, "reveal")] = r.reveal_end
        if r.phase == jobs_pb2.PHASE_VERDICT:
            for v in p.verifiers:
                if not v.vote_hash and not v.voted:
                    out[(v.address, "vote")] = r.verdict_end
        if r.phase == jobs_pb2.PHASE_VOTE_REVEAL:
            for v in p.verifiers:
                if v.vote_hash and not v.voted:
                    out[(v.address, "vote")] = r.vote_reveal_end
        if (
            r.phase == jobs_pb2.PHASE_ATTEST
            and p.outcome == jobs_pb2.OUTCOME_ACCEPTED
            and not p.attested_hash
        ):
            out[(p.address, "attest")] = r.attest_end
    return out


class WorkerMetrics:
    """What a provider worker and a blob server count (module docstring). Call ``blob_in`` /
    ``blob_out`` with byte counts, ``step(loss, seconds, job)`` per inner step,
    ``round_trained(job, round, steps, seconds)`` and ``round_done(ok)`` per round."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.blob_bytes = Counter(
            "loconet_blob_bytes",
            "blob bytes fetched (in) and served (out)",
            ["direction"],
            registry=r,
        )
        self.loss = Gauge(
            "loconet_training_loss", "last inner-step training loss (nats)", ["job"], registry=r
        )
        self.last_round = Gauge(
            "loconet_training_round", "the round last trained, by job", ["job"], registry=r
        )
        self.round_seconds = Gauge(
            "loconet_training_round_seconds",
            "wall time of the last round's inner steps, by job",
            ["job"],
            registry=r,
        )
        self.round_steps = Gauge(
            "loconet_training_round_steps",
            "inner steps of the last round trained, by job",
            ["job"],
            registry=r,
        )
        self.step_seconds = Histogram(
            "loconet_training_step_seconds",
            "time of one inner step",
            buckets=STEP_BUCKETS,
            registry=r,
        )
        self.steps = Counter("loconet_training_steps", "inner steps done", registry=r)
        self.rounds = Counter(
            "loconet_rounds_done", "provider rounds by result", ["result"], registry=r
        )
        self.blob_bytes.labels("in")
        self.blob_bytes.labels("out")

    def blob_in(self, n: int) -> None:
        self.blob_bytes.labels("in").inc(n)

    def blob_out(self, n: int) -> None:
        self.blob_bytes.labels("out").inc(n)

    def step(self, loss: float, seconds: float, job: int | str = "") -> None:
        self.loss.labels(str(job)).set(loss)
        self.step_seconds.observe(seconds)
        self.steps.inc()

    def round_trained(self, job: int, round_: int, steps: int, seconds: float) -> None:
        """A round's training is done: which round, its steps and wall time (the explorer's
        job page reads them as the provider's live progress)."""
        self.last_round.labels(str(job)).set(round_)
        self.round_steps.labels(str(job)).set(steps)
        self.round_seconds.labels(str(job)).set(seconds)

    def round_done(self, ok: bool) -> None:
        self.rounds.labels("committed" if ok else "failed").inc()

    def serve(self, address: str) -> tuple[Any, Any]:
        return serve(self.registry, address)


_default_worker: WorkerMetrics | None = None


def worker_metrics() -> WorkerMetrics:
    """The process-wide WorkerMetrics (one registry per process, shared by the worker and the
    blob server it runs)."""
    global _default_worker
    if _default_worker is None:
        _default_worker = WorkerMetrics()
    return _default_worker
