"""Ask a runner's gRPC health service whether it is serving: a container's HEALTHCHECK.

Exits 0 when the Runner service answers SERVING, 1 otherwise, with the reason on stderr. It reads the
runner's own settings from the environment: a runner that serves TLS is probed over TLS (see
probe_credentials); the health Check needs no token.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from . import access
from .server import ADDRESS_ENV, DEFAULT_ADDRESS, SERVICE_NAME

# A server bound to every interface is reached through loopback from inside its container.
WILDCARD_HOSTS = {"", "0.0.0.0", "[::]", "::"}
# The CA that signed the runner's certificate, as the aggregator names it.
PROBE_CA_ENV = "FWBENCH_TLS_CA"


def probe_address(listen_address: str) -> str:
    host, _, port = listen_address.rpartition(":")
    return f"{'127.0.0.1' if host in WILDCARD_HOSTS else host}:{port}"


def probe_credentials(environ: Mapping[str, str]) -> grpc.ChannelCredentials | None:
    """None for a plaintext runner. A runner that serves TLS is probed over TLS, trusting $FWBENCH_TLS_CA,
    so its certificate must name the probed host (127.0.0.1 for a wildcard address); one that requires
    client certificates is shown its own, which its client CA must then have signed."""
    if not environ.get(access.TLS_CERT_ENV):
        return None
    if not environ.get(PROBE_CA_ENV):
        raise access.AccessError(f"the runner serves TLS: set ${PROBE_CA_ENV} to the CA that signed its certificate")
    own = (
        tuple(access.read_file(f"${name}", environ[name]) for name in (access.TLS_KEY_ENV, access.TLS_CERT_ENV))
        if environ.get(access.TLS_CLIENT_CA_ENV)
        else (None, None)
    )
    return grpc.ssl_channel_credentials(access.read_file(f"${PROBE_CA_ENV}", environ[PROBE_CA_ENV]), *own)


def check(address: str, timeout_s: float, credentials: grpc.ChannelCredentials | None = None) -> tuple[bool, str]:
    channel = grpc.secure_channel(address, credentials) if credentials else grpc.insecure_channel(address)
    with channel:
        try:
            response = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=timeout_s
            )
        except grpc.RpcError as error:
            return False, f"{address}: {error.code().name}: {error.details()}"
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
    return response.status == health_pb2.HealthCheckResponse.SERVING, f"{address}: {SERVICE_NAME} {status}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--address",
        default=os.environ.get(ADDRESS_ENV, DEFAULT_ADDRESS),
        help=f"the runner's listen address (default: ${ADDRESS_ENV} or {DEFAULT_ADDRESS}); a wildcard host means loopback",
    )
    parser.add_argument("--timeout-s", type=float, default=5.0, help="how long to wait for the answer")
    args = parser.parse_args(argv)
    try:
        credentials = probe_credentials(os.environ)
    except access.AccessError as error:
        print(error, file=sys.stderr)
        return 1
    serving, message = check(probe_address(args.address), args.timeout_s, credentials)
    print(message, file=sys.stdout if serving else sys.stderr)
    return 0 if serving else 1


if __name__ == "__main__":
    sys.exit(main())
