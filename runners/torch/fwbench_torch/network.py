"""Which network interface gloo uses. Left to itself, gloo takes the address this host's name resolves to; on a
host with several networks (a container on two Compose networks, a cluster node with a management and a data
network) that can be one the other ranks cannot reach, and the job hangs until its timeout. The interface
through which this host reaches another runner of the job is one that runner can reach it through. (Not the
route to the rendezvous: node 0 hosts it, and its own name may resolve, there, to any of its networks.)"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct
from pathlib import Path

GLOO_INTERFACE_ENV = "GLOO_SOCKET_IFNAME"
_SIOCGIFADDR = 0x8915  # Linux ioctl: an interface's IPv4 address


def route_to(endpoint: str) -> str | None:
    """The local address this host reaches HOST:PORT from (the kernel's route; no packet is sent)."""
    host, _, port = endpoint.rpartition(":")
    try:
        family, _, _, _, address = socket.getaddrinfo(host.strip("[]"), int(port), proto=socket.IPPROTO_UDP)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(address)
            return probe.getsockname()[0]
    except (OSError, ValueError):
        return None


def _ipv4_of(name: str) -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            answer = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:  # no IPv4 address
            return None
    return socket.inet_ntoa(answer[20:24])


def _ipv6_interfaces() -> dict[str, str]:
    """IPv6 address -> interface, from /proc/net/if_inet6 (address in hex, ..., interface name)."""
    try:
        lines = Path("/proc/net/if_inet6").read_text().splitlines()
    except OSError:
        return {}
    return {str(ipaddress.IPv6Address(bytes.fromhex(line.split()[0]))): line.split()[-1] for line in lines}


def interface_of(address: str) -> str | None:
    """The interface holding `address`, or None where none is found (e.g. not Linux)."""
    if ipaddress.ip_address(address).version == 6:
        return _ipv6_interfaces().get(str(ipaddress.ip_address(address)))
    return next((name for _, name in socket.if_nameindex() if _ipv4_of(name) == address), None)


def loopback_listener(endpoint: str) -> socket.socket | None:
    """A socket listening on HOST:PORT where HOST is a loopback address or localhost; else None. A name that
    resolves to loopback only here (as a host's own name may, in /etc/hosts) does not count: other hosts reach
    this one at that name elsewhere."""
    host, _, port = endpoint.rpartition(":")
    host = host.strip("[]")
    if host != "localhost":
        try:
            if not ipaddress.ip_address(host).is_loopback:
                return None
        except ValueError:  # a host name
            return None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, int(port)), family=family)


def choose_gloo_interface(rendezvous: str, endpoints: tuple[str, ...] = (), node_rank: int = 0) -> None:
    """Have gloo use the interface that reaches another runner of the job (`endpoints`, in node order; this
    one is `node_rank`), or on one runner the rendezvous (loopback), unless the user chose one."""
    if GLOO_INTERFACE_ENV in os.environ:
        return
    peer = next((endpoint for node, endpoint in enumerate(endpoints) if node != node_rank), rendezvous)
    local = route_to(peer)
    interface = local and interface_of(local)
    if interface:
        os.environ[GLOO_INTERFACE_ENV] = interface
