"""gloo's network interface in a DDP worker on the CPU: the one that reaches the job's rendezvous, unless the user
chose one. Left to gloo, a host with several networks (a container on two Compose networks) may offer the other
ranks an address they cannot reach, and the job hangs (tests/test_containers.py runs that case)."""

from __future__ import annotations

import os
import subprocess

from fwbench_aggregator import launch

CHOSEN = "from fwbench_torch import network; import os; network.choose_gloo_interface({endpoint!r}); print(os.environ.get('GLOO_SOCKET_IFNAME'))"


def chosen_interface(endpoint: str, **env: str) -> str:
    python = launch.default_venvs() / "torch" / "bin" / "python"
    clean = {k: v for k, v in os.environ.items() if k != "GLOO_SOCKET_IFNAME"}
    done = subprocess.run([str(python), "-c", CHOSEN.format(endpoint=endpoint)], env={**clean, **env},
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()


def test_gloo_uses_the_interface_that_reaches_the_rendezvous():
    assert chosen_interface("127.0.0.1:29500") == "lo"
    assert chosen_interface("[::1]:29500") == "lo"


def test_an_interface_the_user_chose_stands_and_an_unknown_host_changes_nothing():
    assert chosen_interface("127.0.0.1:29500", GLOO_SOCKET_IFNAME="eth7") == "eth7"
    assert chosen_interface("no-such-host.invalid:29500") == "None"
