"""gloo's network interface in a DDP worker on the CPU: the one that reaches the job's rendezvous, unless the user
chose one. Left to gloo, a host with several networks (a container on two Compose networks) may offer the other
ranks an address they cannot reach, and the job hangs (tests/test_containers.py runs that case). And where rank
0's c10d store listens: on a loopback rendezvous, there only."""

from __future__ import annotations

import os
import subprocess

import pytest

from fwbench_aggregator.run import launch

# Every test here runs a real framework runner.
pytestmark = pytest.mark.frameworks

CHOSEN = """\
import os, sys
from fwbench_torch import network
network.choose_gloo_interface(sys.argv[1], tuple(sys.argv[3:]), int(sys.argv[2]))
print(os.environ.get("GLOO_SOCKET_IFNAME"))
"""


def chosen_interface(rendezvous: str, endpoints: tuple[str, ...] = (), node_rank: int = 0, **env: str) -> str:
    python = launch.default_venvs() / "torch" / "bin" / "python"
    clean = {k: v for k, v in os.environ.items() if k != "GLOO_SOCKET_IFNAME"}
    done = subprocess.run(
        [str(python), "-c", CHOSEN, rendezvous, str(node_rank), *endpoints],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def test_on_one_runner_gloo_uses_the_interface_that_reaches_the_rendezvous():
    assert chosen_interface("127.0.0.1:29500") == "lo"
    assert chosen_interface("[::1]:29500") == "lo"


def test_across_runners_gloo_uses_the_interface_that_reaches_another_runner():
    # Node 0 routes to node 1 (here loopback), never to its own endpoint, whose address may be on any network.
    assert chosen_interface("no-such-host.invalid:29500", ("no-such-host.invalid:29500", "127.0.0.1:29501"), 0) == "lo"
    assert chosen_interface("127.0.0.1:29500", ("127.0.0.1:29500", "no-such-host.invalid:29501"), 1) == "lo"


def test_an_interface_the_user_chose_stands_and_an_unknown_host_changes_nothing():
    assert chosen_interface("127.0.0.1:29500", GLOO_SOCKET_IFNAME="eth7") == "eth7"
    assert chosen_interface("no-such-host.invalid:29500") == "None"


LISTENING = """\
import sys
from fwbench_torch import network
for endpoint in sys.argv[1:]:
    listener = network.loopback_listener(endpoint)
    print(listener.getsockname()[0] if listener else None)
"""


def test_the_store_of_a_loopback_rendezvous_listens_there_and_any_other_is_left_to_c10d():
    # c10d's own server listens on every interface. A host name counts as not loopback even where it resolves to
    # loopback (node 0's own name in its /etc/hosts): the other nodes reach node 0 at it elsewhere.
    endpoints = ["127.0.0.1:0", "[::1]:0", "localhost:0", "10.1.0.5:29500", "0.0.0.0:29500", "hostA:29500"]
    python = launch.default_venvs() / "torch" / "bin" / "python"
    done = subprocess.run(
        [str(python), "-c", LISTENING, *endpoints], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["127.0.0.1", "::1", "127.0.0.1", "None", "None", "None"]
