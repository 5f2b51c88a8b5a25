"""Ask a runner's gRPC health service whether it is serving: a container's HEALTHCHECK.

Exits 0 when the Runner service answers SERVING, 1 otherwise, with the reason on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from .server import ADDRESS_ENV, DEFAULT_ADDRESS, SERVICE_NAME

# A server bound to every interface is reached through loopback from inside its container.
WILDCARD_HOSTS = {"", "0.0.0.0", "[::]", "::"}


def probe_address(listen_address: str) -> str:
    host, _, port = listen_address.rpartition(":")
    return f"{'127.0.0.1' if host in WILDCARD_HOSTS else host}:{port}"


def check(address: str, timeout_s: float) -> tuple[bool, str]:
    with grpc.insecure_channel(address) as channel:
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
    serving, message = check(probe_address(args.address), args.timeout_s)
    print(message, file=sys.stdout if serving else sys.stderr)
    return 0 if serving else 1


if __name__ == "__main__":
    sys.exit(main())
