"""One simulated broker's HTTP server: Pulsar's admin REST API (`balancer.sim.routes`) over
the shared `SimModel`.

Each broker of each cluster listens on its own port on 127.0.0.1; broker 0's URL is the
cluster's admin/service URL. Every broker answers every admin request (as any Pulsar broker
does), but `broker-stats/topics` only lists the topics of the bundles that broker owns.
Errors are Pulsar's JSON `{"reason": "..."}`. A namespace held by a peer cluster is answered
with 307 to the same path on (one host of) that peer's ClusterData service URL only on the
routes Pulsar redirects (split, unload, a topic's stats and internalStats); the others are
answered from the asked cluster's own metadata (`balancer.sim.peers` says which and why).
"""

from __future__ import annotations

import hmac
import json
import logging
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from balancer.sim.faults import FaultInjector, FaultKind
from balancer.sim.http_types import MAX_BODY_BYTES, RawJson, Request, Response
from balancer.sim.model import OwnerRedirect, PeerRedirect, SimError, SimModel
from balancer.sim.routes import route

log = logging.getLogger(__name__)


class BrokerServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        *,
        model: SimModel,
        faults: FaultInjector,
        cluster: str,
        broker: int,
        required_token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(address, _BrokerHandler)
        # The broker's webServicePortTls listener: the handshake runs in the request's
        # thread (do_handshake_on_connect=False), so a client that never completes one
        # cannot stall the accept loop.
        self.ssl_context = ssl_context
        if ssl_context is not None:
            self.socket = ssl_context.wrap_socket(
                self.socket, server_side=True, do_handshake_on_connect=False
            )
        self.model = model
        self.faults = faults
        self.cluster = cluster
        self.broker = broker
        # Token auth as Pulsar's AuthenticationProviderToken: `Authorization: Bearer <token>`
        # or 401. Set from outside the scenario so the token never sits in a YAML file.
        self.required_token = required_token
        self.unauthorized = 0  # requests answered 401
        self._unauthorized_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def tls(self) -> bool:
        return self.ssl_context is not None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"{'https' if self.tls else 'http'}://{host!s}:{port}"

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"sim-{self.cluster}-broker-{self.broker}",
            daemon=True,
        )
        self._thread.start()

    @property
    def serving(self) -> bool:
        return self._thread is not None and not self._closed

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self._closed = True
        if self._thread is not None:
            self._thread.join(timeout=5)


class _BrokerHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in separate writes
    server: BrokerServer
    server_version = "pulsar-balancer-sim"

    def do_GET(self) -> None:
        self._handle("GET")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.server.url, format % args)

    def _read_body(self) -> bytes | None:
        """The request body, or None (after answering 400/413) when it cannot be read."""
        raw = self.headers.get("Content-Length") or "0"
        if not raw.strip().isdigit():
            self.close_connection = True  # the stream position is unknown now
            self._send(Response(400, {"reason": f"Invalid Content-Length {raw!r}"}))
            return None
        length = int(raw)
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            self._send(Response(413, {"reason": f"Request body over {MAX_BODY_BYTES} bytes"}))
            return None
        return self.rfile.read(length) if length > 0 else b""

    def _handle(self, method: str) -> None:
        srv = self.server
        if srv._closed:  # a stopped broker: a connection kept alive dies with it, unanswered
            self.close_connection = True
            return
        split = urlsplit(self.path)
        name, handler, params = route(method, split.path)
        srv.model.count_request(srv.cluster, name, broker=srv.broker)
        body = self._read_body()
        if body is None:
            return
        if srv.required_token is not None and not hmac.compare_digest(
            self.headers.get("Authorization", "").encode(),
            f"Bearer {srv.required_token}".encode(),
        ):
            with srv._unauthorized_lock:
                srv.unauthorized += 1
            self._send(Response(401, {"reason": "Authentication required"}))
            return
        fault = srv.faults.decide(split.path, srv.cluster, method)
        if fault.latency_s > 0:
            time.sleep(fault.latency_s)  # a real delay: that is the fault being injected
        if fault.kind in (FaultKind.DROP, FaultKind.DOWN):
            self.close_connection = True  # no response at all: the client sees a reset
            return
        if fault.kind is FaultKind.REDIRECT_LOOP:
            self._send(Response(307, None, headers={"Location": f"{srv.url}{self.path}"}))
            return
        if fault.kind is FaultKind.ERROR_500:
            self._send(Response(500, {"reason": "Injected fault: internal server error"}))
            return
        if fault.kind is FaultKind.ERROR_503:
            self._send(Response(503, {"reason": "Injected fault: service unavailable"}))
            return
        if handler is None:
            status = 405 if name == "method_not_allowed" else 404
            self._send(Response(status, {"reason": f"No {method} handler for {split.path}"}))
            return
        request = Request(
            method=method,
            path=split.path,
            query=parse_qs(split.query, keep_blank_values=True),
            body=body,
            cluster=srv.cluster,
            broker=srv.broker,
            params=params,
            tls=srv.tls,
        )
        try:
            response = handler(srv.model, request)
        except SimError as exc:
            response = Response(exc.status, {"reason": exc.reason})
        except PeerRedirect as redirect:
            # PulsarWebResource.validateGlobalNamespaceOwnershipAsync -> getRedirectionUrl:
            # one host of the peer's ClusterData serviceUrl, same path and query.
            # Over https to a peer with serviceUrlTls: that one (getRedirectionUrl).
            with srv.model.lock:
                peer = srv.model.clusters[redirect.cluster]
                tls_peer = peer.broker_tls_urls[0] if srv.tls and peer.broker_tls_urls else None
                peer_url = tls_peer or peer.redirect_origin()
            location = f"{peer_url}{self.path}"
            response = Response(307, None, headers={"Location": location})
        except OwnerRedirect as owner:
            # PulsarWebResource.validateBundleOwnership: the owner's httpUrlTls when the
            # request came over https, else its httpUrl.
            owner_cluster = srv.model.clusters[owner.cluster]
            tls_url = owner_cluster.web_service_url_tls(owner.broker) if srv.tls else None
            broker_url = tls_url or owner_cluster.broker_urls[owner.broker]
            # UriBuilder...replaceQueryParam("authoritative", newAuthoritative)
            query = {**request.query, "authoritative": [str(owner.authoritative).lower()]}
            location = f"{broker_url}{split.path}?{urlencode(query, doseq=True)}"
            response = Response(307, None, headers={"Location": location})
        except Exception:  # a bug in the simulator must not kill the server thread
            log.exception("simulator error on %s %s", method, self.path)
            response = Response(500, {"reason": "Simulator internal error"})
        self._send(response)

    def _send(self, response: Response) -> None:
        if response.body is None:
            payload = b""
        elif isinstance(response.body, RawJson):
            payload = response.body.payload
        elif response.content_type == "text/plain":
            payload = str(response.body).encode("utf-8")
        else:
            payload = json.dumps(response.body, separators=(",", ":")).encode("utf-8")
        self.send_response(response.status)
        for key, value in response.headers.items():
            self.send_header(key, value)
        if payload:
            self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if payload:
            self.wfile.write(payload)
