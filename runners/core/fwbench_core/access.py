"""Who may talk to a runner: where it listens, TLS (optionally requiring client certificates) and a shared
token. Every call needs the token when one is set, except the standard health Check, so that a container's
health probe and the aggregator's wait for a starting runner need none: Check tells only whether the
runner serves.

Each start-up option has an environment variable, so that compose files can set it. A token never goes on
a command line, where `ps` shows it to every local user: it comes from a file, or, for a process that
starts the runner itself (the aggregator's embedded runners), from the environment, which only the same
user can read.

A runner that listens beyond loopback with neither TLS nor a token is refused unless told --insecure: anyone who
reaches it could run any model, read its plug-ins' listing and fill its device, and a mistyped --address would
say nothing (Jupyter refuses the same; KServe and Triton leave it to the network, which is why --insecure exists:
the runner images set it, their listener being on the container's own network and published on loopback only).
"""

from __future__ import annotations

import argparse
import hmac
import logging
import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

import grpc

from .env_flags import EnvFlagError, env_flag
from .safe_read import FileRefused, read_small_file

log = logging.getLogger("fwbench.runner")

TLS_CERT_ENV = "FWBENCH_TLS_CERT"
TLS_KEY_ENV = "FWBENCH_TLS_KEY"
TLS_CLIENT_CA_ENV = "FWBENCH_TLS_CLIENT_CA"
TOKEN_FILE_ENV = "FWBENCH_TOKEN_FILE"
TOKEN_ENV = "FWBENCH_RUNNER_TOKEN"
INSECURE_ENV = "FWBENCH_RUNNER_INSECURE"

# The one call that needs no token.
OPEN_METHODS = frozenset({"/grpc.health.v1.Health/Check"})
TOKEN_METADATA = "authorization"
# Shorter tokens can be guessed; `openssl rand -hex 32` makes a good one.
MIN_TOKEN_CHARS = 16
# A token travels as a gRPC metadata value: printable ASCII without spaces.
TOKEN_CHARACTERS = re.compile(r"[\x21-\x7e]+")
# Without so_reuseport 0, gRPC sets SO_REUSEPORT, and a second runner on a port in use would silently share it.
# The ping settings accept a client's keepalive pings every few seconds, also between calls (gRPC's default
# answers pings more often than every 5 minutes with "too many pings" and closes the connection): an aggregator
# on a cluster pings its runners so that a node that vanishes without a TCP reset is noticed in seconds.
SERVER_OPTIONS = (
    ("grpc.so_reuseport", 0),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 1000),
    ("grpc.http2.max_ping_strikes", 0),
)
LOOPBACK_HOSTS = ("127.", "[::1]", "localhost")
# A certificate chain, a key or a token file holds a few KiB.
MAX_ACCESS_FILE_BYTES = 1 << 20


class AccessError(ValueError):
    """A start-up setting that cannot work; the message names the option."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env = os.environ
    parser.add_argument(
        "--tls-cert",
        default=env.get(TLS_CERT_ENV) or None,
        metavar="PEM",
        help=f"serve TLS with this certificate chain and --tls-key (default: ${TLS_CERT_ENV}; none: plaintext)",
    )
    parser.add_argument(
        "--tls-key",
        default=env.get(TLS_KEY_ENV) or None,
        metavar="PEM",
        help=f"the private key of --tls-cert (default: ${TLS_KEY_ENV})",
    )
    parser.add_argument(
        "--tls-client-ca",
        default=env.get(TLS_CLIENT_CA_ENV) or None,
        metavar="PEM",
        help=f"require client certificates signed by this CA (mutual TLS; default: ${TLS_CLIENT_CA_ENV})",
    )
    parser.add_argument(
        "--token-file",
        default=env.get(TOKEN_FILE_ENV) or None,
        metavar="FILE",
        help=f"require the token this file holds on every call but the health Check, as the metadata "
        f"'authorization: Bearer TOKEN' (default: ${TOKEN_FILE_ENV}, or the token itself in ${TOKEN_ENV})",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="listen beyond loopback with neither TLS nor a token, where the network itself is the guard (a "
        f"container's own network); refused otherwise (default: ${INSECURE_ENV}: 1, true, yes or on)",
    )


@dataclass(frozen=True)
class Access:
    """How a runner listens and whom it serves."""

    tls: grpc.ServerCredentials | None = None
    client_certificates: bool = False
    token: str | None = None
    insecure: bool = False  # listening beyond loopback unguarded is allowed (--insecure)

    def interceptors(self) -> list[grpc.ServerInterceptor]:
        return [TokenCheck(self.token)] if self.token else []

    def bind(self, server: grpc.Server, address: str) -> int:
        """Listen on `address` (port 0 picks a free one); the port, or SystemExit naming the address."""
        if not self.tls and not self.token and not address.startswith(LOOPBACK_HOSTS):
            if not self.insecure:
                raise SystemExit(
                    f"refusing to listen on {address} with neither TLS nor a token: anyone who reaches it could drive "
                    f"the runner. Give --token-file (or ${TOKEN_ENV}) or --tls-cert and --tls-key, listen on "
                    f"127.0.0.1, or, where the network itself is the guard (a container's own network), --insecure "
                    f"(${INSECURE_ENV}=1)"
                )
            log.warning(
                "%s is not loopback and the runner has neither TLS nor a token (--insecure): anyone who "
                "reaches it can drive the runner (see --tls-cert and --token-file)",
                address,
            )
        try:
            port = server.add_secure_port(address, self.tls) if self.tls else server.add_insecure_port(address)
        except RuntimeError:
            port = 0
        if port == 0:
            raise SystemExit(
                f"cannot listen on {address}: the port is in use (another runner?) or the host is not an address "
                "of this machine; pick another with --address"
            )
        return port

    def describe(self) -> str:
        mode = "TLS with client certificates" if self.client_certificates else "TLS" if self.tls else "plaintext"
        return f"{mode}, {'token required' if self.token else 'no token'}"


def from_args(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> Access:
    """The access the options ask for, checked now: a file that cannot be read or does not fit fails here."""
    if bool(args.tls_cert) != bool(args.tls_key):
        raise AccessError("--tls-cert and --tls-key go together: give the certificate chain and its private key")
    if args.tls_client_ca and not args.tls_cert:
        raise AccessError(
            "--tls-client-ca needs --tls-cert and --tls-key: client certificates are checked over TLS only"
        )
    tls = None
    if args.tls_cert:
        cert, key = read_file("--tls-cert", args.tls_cert), read_file("--tls-key", args.tls_key)
        client_ca = read_file("--tls-client-ca", args.tls_client_ca) if args.tls_client_ca else None
        # gRPC would take any bytes and fail each handshake later; Python's ssl checks the PEM now.
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(args.tls_cert, args.tls_key, password=lambda: _encrypted_key(args.tls_key))
        except ssl.SSLError as error:
            problem = "the key is not the certificate's" if error.reason == "KEY_VALUES_MISMATCH" else "not PEM"
            raise AccessError(
                f"--tls-cert {args.tls_cert} / --tls-key {args.tls_key}: {problem}; give the server's PEM certificate "
                "chain and its PEM private key"
            ) from None
        if client_ca:
            try:
                context.load_verify_locations(args.tls_client_ca)
            except ssl.SSLError:
                raise AccessError(f"--tls-client-ca {args.tls_client_ca}: holds no PEM CA certificate") from None
        tls = grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None
        )
    try:
        insecure = args.insecure or env_flag(INSECURE_ENV, False, environ)
    except EnvFlagError as error:
        raise AccessError(str(error)) from None
    return Access(tls, bool(args.tls_client_ca), _token(args.token_file, environ.get(TOKEN_ENV) or None), insecure)


def read_file(option: str, path: str) -> bytes:
    try:
        return read_small_file(path, MAX_ACCESS_FILE_BYTES)
    except FileRefused as error:
        raise AccessError(f"{option} {error}") from None


def _encrypted_key(path: str):
    # Called only for an encrypted key, which gRPC cannot use (and which ssl would otherwise prompt for).
    raise AccessError(
        f"--tls-key {path}: the key is encrypted; gRPC needs it unencrypted (openssl pkey -in KEY -out PLAIN)"
    )


def _token(token_file: str | None, token_from_env: str | None) -> str | None:
    if token_file and token_from_env:
        raise AccessError(f"give the token once: --token-file (or ${TOKEN_FILE_ENV}) or ${TOKEN_ENV}, not both")
    if token_file:
        token, where = (
            read_file("--token-file", token_file).decode("ascii", "replace").strip(),
            f"--token-file {token_file}",
        )
    elif token_from_env:
        token, where = token_from_env, f"${TOKEN_ENV}"
    else:
        return None
    if not TOKEN_CHARACTERS.fullmatch(token):
        raise AccessError(f"{where}: a token is one word of printable ASCII characters, e.g. `openssl rand -hex 32`")
    if len(token) < MIN_TOKEN_CHARS:
        raise AccessError(
            f"{where}: the token has {len(token)} characters; use at least {MIN_TOKEN_CHARS}, e.g. `openssl rand -hex 32`"
        )
    return token


class TokenCheck(grpc.ServerInterceptor):
    """Refuses every call but OPEN_METHODS that lacks 'authorization: Bearer TOKEN', before its request is
    decoded; the comparison takes the same time however much of the token matches."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler_call_details.method in OPEN_METHODS:
            return handler
        presented = dict(handler_call_details.invocation_metadata).get(TOKEN_METADATA)
        refusal = self._refusal(presented)
        return handler if refusal is None else _refusing(handler, handler_call_details.method, refusal)

    def _refusal(self, presented: str | None) -> str | None:
        if presented is None:
            return "this runner requires a token: send the metadata 'authorization: Bearer TOKEN'"
        scheme, _, token = presented.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.encode(), self._token):
            return "the token does not match this runner's"
        return None


HANDLER_KINDS = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def _refusing(handler: grpc.RpcMethodHandler, method: str, message: str) -> grpc.RpcMethodHandler:
    def refuse(request, context):
        log.warning("refused %s from %s: %s", method, context.peer(), message)
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    # The same kind of handler as the method's, with no deserializer: the request is never decoded.
    return HANDLER_KINDS[(handler.request_streaming, handler.response_streaming)](refuse)
