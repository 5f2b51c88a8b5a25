"""How the aggregator reaches a runner: plaintext or TLS (with a client certificate where the runner asks
for one), with or without the runner's token. Every channel the aggregator opens comes from here, and a
refusal is explained here, naming the options to check."""

from __future__ import annotations

import collections
import re
import secrets
import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc

TLS_CA_ENV = "FWBENCH_TLS_CA"
TLS_CERT_ENV = "FWBENCH_TLS_CERT"
TLS_KEY_ENV = "FWBENCH_TLS_KEY"
TOKEN_FILE_ENV = "FWBENCH_TOKEN_FILE"
TOKEN_METADATA = "authorization"
# A token travels as a gRPC metadata value: printable ASCII without spaces.
TOKEN_CHARACTERS = re.compile(r"[\x21-\x7e]+")

# The runner's side of the contract (fwbench_core.access, which the aggregator does not install): the
# environment that configures a runner's access. An embedded runner gets its token in RUNNER_TOKEN_ENV, and
# none of the others, which it would otherwise inherit from the aggregator's own environment.
RUNNER_TOKEN_ENV = "FWBENCH_RUNNER_TOKEN"
RUNNER_ACCESS_ENVS = (TLS_CERT_ENV, TLS_KEY_ENV, "FWBENCH_TLS_CLIENT_CA", TOKEN_FILE_ENV)

TLS_OPTIONS = (
    f"--tls-ca/${TLS_CA_ENV}, and --tls-cert/${TLS_CERT_ENV} with --tls-key/${TLS_KEY_ENV} where the runner requires a "
    "client certificate"
)
TOKEN_OPTIONS = f"--token-file/${TOKEN_FILE_ENV}"


@dataclass(frozen=True)
class Transport:
    """What the aggregator shows a runner: PEM bytes for TLS, and the token."""

    tls_ca: bytes | None = None
    tls_cert: bytes | None = None
    tls_key: bytes | None = None
    token: str | None = None
    # Seconds between keepalive pings on an idle or streaming connection; None: none. A runner on a machine that
    # vanishes (a cluster node that fails) sends no TCP reset: without pings a call to it would wait for ever.
    keepalive_s: float | None = None

    @classmethod
    def from_files(
        cls, tls_ca: Path | None, tls_cert: Path | None, tls_key: Path | None, token_file: Path | None
    ) -> Transport:
        """Read and check the files now (ValueError naming the option), not at the first handshake."""
        if bool(tls_cert) != bool(tls_key):
            raise ValueError(
                "--tls-cert and --tls-key go together: this client's certificate chain and its private key"
            )
        context = ssl.create_default_context()
        try:
            if tls_ca:
                context.load_verify_locations(cafile=tls_ca)
        except ssl.SSLError:
            raise ValueError(f"--tls-ca {tls_ca}: holds no PEM CA certificate") from None
        try:
            if tls_cert:
                context.load_cert_chain(tls_cert, tls_key, password=lambda: b"")
        except ssl.SSLError as error:
            problem = "the key is not the certificate's" if error.reason == "KEY_VALUES_MISMATCH" else "not PEM"
            raise ValueError(
                f"--tls-cert {tls_cert} / --tls-key {tls_key}: {problem}; give a PEM certificate chain and its "
                "unencrypted PEM private key"
            ) from None
        token = token_file.read_text(errors="replace").strip() if token_file else None
        if token_file and not TOKEN_CHARACTERS.fullmatch(token):
            raise ValueError(f"--token-file {token_file} holds no token: one word of printable ASCII characters")
        return cls(*(path.read_bytes() if path else None for path in (tls_ca, tls_cert, tls_key)), token)

    @property
    def tls(self) -> bool:
        return self.tls_ca is not None or self.tls_cert is not None

    def channel(self, address: str) -> grpc.Channel:
        options = (
            []
            if self.keepalive_s is None
            else [
                ("grpc.keepalive_time_ms", int(self.keepalive_s * 1000)),
                ("grpc.keepalive_timeout_ms", int(self.keepalive_s * 1000)),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.max_pings_without_data", 0),
                # gRPC waits this long for any ping's answer whatever keepalive_timeout says (default 60 s).
                ("grpc.http2.ping_timeout_ms", int(self.keepalive_s * 1000)),
            ]
        )
        if self.tls:
            credentials = grpc.ssl_channel_credentials(self.tls_ca, self.tls_key, self.tls_cert)
            channel = grpc.secure_channel(address, credentials, options=options)
        else:
            channel = grpc.insecure_channel(address, options=options)
        # An interceptor, not call credentials: gRPC sends those over TLS only, and a token must work without.
        return grpc.intercept_channel(channel, BearerToken(self.token)) if self.token else channel

    def explain(self, code: grpc.StatusCode, details: str) -> str:
        """A refusal or failure to connect, in words a user can act on."""
        if code is grpc.StatusCode.UNAUTHENTICATED:
            if self.token:
                return f"refused the connection: it does not accept the token from {TOKEN_OPTIONS} ({details})"
            return f"refused the connection: it needs a token: give it with {TOKEN_OPTIONS} ({details})"
        if code is not grpc.StatusCode.UNAVAILABLE:
            return details
        if any(mark in details for mark in ("Tls handshake", "Ssl handshake", "SSL_ERROR")):
            return f"TLS handshake failed: check {TLS_OPTIONS}, and that the runner serves TLS ({details})"
        if "failed to connect" in details and "Socket closed" in details:
            # All a client sees when the runner ends the handshake: plaintext to TLS, or no certificate it trusts
            # (a runner that dies during a call says "Stream removed").
            return f"runner unreachable ({details}); {self._closed_hint()}"
        return f"runner unreachable ({details})"

    def _closed_hint(self) -> str:
        if not self.tls:
            return f"a runner that serves TLS closes plaintext connections: give --tls-ca/${TLS_CA_ENV}"
        if self.tls_cert is None:
            return (
                f"a runner that requires client certificates closes connections without one: give "
                f"--tls-cert/${TLS_CERT_ENV} and --tls-key/${TLS_KEY_ENV}"
            )
        return "if the runner requires client certificates, check that its --tls-client-ca signed --tls-cert"


# A random token for every invocation: the runners the aggregator starts itself (launch.py) require it, so
# another user of this host cannot drive them through their loopback port.
EMBEDDED = Transport(token=secrets.token_urlsafe(32))


def embedded_runner_env() -> dict[str, str]:
    """The environment an embedded runner gets on top of the aggregator's: plaintext on loopback, EMBEDDED's token."""
    return {**{name: "" for name in RUNNER_ACCESS_ENVS}, RUNNER_TOKEN_ENV: EMBEDDED.token}


class _CallDetails(
    collections.namedtuple(
        "_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
    ),
    grpc.ClientCallDetails,
):
    pass


class BearerToken(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds 'authorization: Bearer TOKEN' to every call."""

    def __init__(self, token: str) -> None:
        self._metadata = (TOKEN_METADATA, f"Bearer {token}")

    def _with_token(self, details: grpc.ClientCallDetails) -> _CallDetails:
        return _CallDetails(
            details.method,
            details.timeout,
            [*(details.metadata or ()), self._metadata],
            details.credentials,
            details.wait_for_ready,
            details.compression,
        )

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._with_token(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._with_token(client_call_details), request)

    def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return continuation(self._with_token(client_call_details), request_iterator)

    def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        return continuation(self._with_token(client_call_details), request_iterator)
