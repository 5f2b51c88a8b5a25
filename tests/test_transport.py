"""Who may talk to a runner, over real gRPC to real runner processes (the fake runner): where it listens,
a port already in use, TLS and client certificates, the token, and the CLI's options and messages."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
import trustme
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from support.cli import fwbench

from fwbench_aggregator.base import env_flags as aggregator_flags
from fwbench_aggregator.run import connection, device_lock
from fwbench_aggregator.run.client import RunnerClient, RunnerFailure
from fwbench_aggregator.run.connection import Transport
from fwbench_aggregator.run.launch import LocalRunner, default_venvs, embedded_command, fake_runner_command
from fwbench_core import access, server
from fwbench_core import env_flags as core_flags

RPC_TIMEOUT_S = 30
START_TIMEOUT_S = 120
TOKEN = "0123456789abcdef0123456789abcdef"
RUN = pb.RunRequest(
    model="resnet18", mode=pb.MODE_INFER, batch_size=1, warmup_steps=0, measured_steps=2, min_measure_s=0.0
)


class Pki:
    """A CA, the runner's certificate (for 127.0.0.1), a client's, one from another CA, and a token file."""

    def __init__(self, folder: Path) -> None:
        ca, other_ca = trustme.CA(), trustme.CA()
        self.ca = self._write(folder / "ca.pem", ca.cert_pem)
        self.other_ca = self._write(folder / "other-ca.pem", other_ca.cert_pem)
        self.server_cert, self.server_key = self._issue(ca, folder, "server", "127.0.0.1", "localhost")
        self.client_cert, self.client_key = self._issue(ca, folder, "client", "aggregator.example")
        self.stranger_cert, self.stranger_key = self._issue(other_ca, folder, "stranger", "aggregator.example")
        self.token_file = folder / "token"
        self.token_file.write_text(TOKEN + "\n")
        self.wrong_token_file = folder / "wrong-token"
        self.wrong_token_file.write_text("f" * 32 + "\n")

    @staticmethod
    def _write(path: Path, blob) -> Path:
        blob.write_to_path(str(path))
        return path

    def _issue(self, ca, folder: Path, name: str, *identities: str) -> tuple[Path, Path]:
        cert = ca.issue_cert(*identities)
        chain = folder / f"{name}.pem"
        chain.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
        return chain, self._write(folder / f"{name}-key.pem", cert.private_key_pem)

    def transport(self, ca=True, client=False, stranger=False, token: Path | None = None) -> Transport:
        cert, key = (
            (self.client_cert, self.client_key)
            if client
            else (self.stranger_cert, self.stranger_key)
            if stranger
            else (None, None)
        )
        return Transport.from_files(self.ca if ca else None, cert, key, token)

    def server_flags(self, client_ca: bool = False) -> list[str]:
        flags = ["--tls-cert", str(self.server_cert), "--tls-key", str(self.server_key)]
        return flags + ["--tls-client-ca", str(self.ca)] if client_ca else flags


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def start(tmp_path_factory):
    """start(*flags, env=..., transport=...): a fake runner on a free loopback port; stopped after the module."""
    runners = []

    def start_runner(
        *flags: str, env: dict | None = None, transport: Transport = Transport(), command=None
    ) -> LocalRunner:
        log = tmp_path_factory.mktemp("logs") / "fake.log"
        runner = LocalRunner("fake", [*(command or fake_runner_command()), *flags], log, env=env, transport=transport)
        runners.append(runner)
        runner.start(START_TIMEOUT_S)
        return runner

    yield start_runner
    for runner in runners:
        runner.stop()


def describe(address: str, transport: Transport = Transport()) -> pb.DescribeResponse:
    with RunnerClient("fake", address, transport) as client:
        return client.describe()


def refusal(address: str, transport: Transport = Transport()) -> RunnerFailure:
    with pytest.raises(RunnerFailure) as failure:
        describe(address, transport)
    return failure.value


def connects(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(5)
        return sock.connect_ex((host, port)) == 0


def runner_process(*flags: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """A fake runner that is expected to refuse to start."""
    return subprocess.run(
        [*fake_runner_command(), *flags],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


# --- where a runner listens ----------------------------------------------------------------------


def test_a_bare_runner_listens_on_loopback_only(start, monkeypatch):
    assert server.DEFAULT_ADDRESS.startswith("127.0.0.1:")
    port = int(server.DEFAULT_ADDRESS.rsplit(":", 1)[1])
    if connects("127.0.0.1", port):
        pytest.skip(f"port {port} is taken on this host: the default address cannot be tried")
    monkeypatch.delenv(server.ADDRESS_ENV, raising=False)
    command = [sys.executable, "-m", "fwbench_core.fake"]  # no --address
    runner = start(command=command)
    assert runner.address == server.DEFAULT_ADDRESS
    # All of 127/8 is this host's loopback: a wildcard listener would answer on 127.0.0.2 too.
    assert connects("127.0.0.1", port) and not connects("127.0.0.2", port)


def test_a_runner_told_to_listen_everywhere_answers_on_every_address_and_warns_when_unguarded(start):
    # The control for the test above: the probe on 127.0.0.2 does see a wildcard listener.
    runner = start("--address", "0.0.0.0:0", "--insecure")
    port = int(runner.address.rsplit(":", 1)[1])
    assert connects("127.0.0.2", port)
    assert "anyone who reaches it can drive the runner" in runner.log_path.read_text()


@pytest.mark.parametrize("env", [{access.INSECURE_ENV: value} for value in ("", "0", "false", "no", "OFF", " False ")])
def test_a_runner_refuses_to_listen_beyond_loopback_unguarded_unless_told_insecure(env):
    done = runner_process("--address", "0.0.0.0:0", env=env)
    assert done.returncode != 0 and '"listening"' not in done.stdout
    assert done.stderr.splitlines()[-1].startswith(
        "refusing to listen on 0.0.0.0:0 with neither TLS nor a token: anyone who reaches it could drive the runner. "
        f"Give --token-file (or ${access.TOKEN_ENV}) or --tls-cert and --tls-key, listen on 127.0.0.1, or, where the "
        f"network itself is the guard (a container's own network), --insecure (${access.INSECURE_ENV}=1)"
    ), done.stderr


@pytest.mark.parametrize("value", ["maybe", "2", "enable"])
def test_a_switch_that_is_no_accepted_word_is_refused_at_start_naming_the_variable(value):
    done = runner_process("--address", "0.0.0.0:0", env={access.INSECURE_ENV: value})
    assert done.returncode == 2 and '"listening"' not in done.stdout and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1].endswith(
        f"error: ${access.INSECURE_ENV} is {value!r}; accepted: 1, true, yes, on (on) or 0, false, no, off (off), in "
        "any case, or unset"
    ), done.stderr


def test_the_runners_and_the_aggregators_switches_read_alike():
    # The aggregator does not install the core: each has its own reading, held equal here.
    words = ["", " ", "1", "true", "YES", "On", "0", "false", "No", "OFF", "maybe", "2", "y"]
    for default in (True, False):
        for word in words:
            readings = []
            for flags in (core_flags, aggregator_flags):
                try:
                    readings.append(flags.env_flag("X", default, {"X": word}))
                except flags.EnvFlagError as error:
                    readings.append(str(error))
            assert readings[0] == readings[1], (word, readings)
    assert core_flags.env_flag("X", True, {}) and not core_flags.env_flag("X", False, {"X": "off"})


def test_the_device_locks_switch_is_read_strictly(monkeypatch):
    monkeypatch.setenv(device_lock.ENV, "of")
    with pytest.raises(aggregator_flags.EnvFlagError, match=r"^\$FWBENCH_DEVICE_LOCKS is 'of'; accepted: "):
        device_lock.locks_enabled()
    monkeypatch.setenv(device_lock.ENV, "no")
    assert not device_lock.locks_enabled()


def test_the_images_setting_lets_a_runner_listen_beyond_loopback(start):
    runner = start("--address", "0.0.0.0:0", env={access.INSECURE_ENV: "1"})
    assert connects("127.0.0.2", int(runner.address.rsplit(":", 1)[1]))


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_a_second_runner_on_a_port_in_use_fails_at_start_up_naming_it(start, host):
    first = start()
    port = first.address.rsplit(":", 1)[1]
    second = runner_process("--address", f"{host}:{port}", "--insecure")
    assert second.returncode != 0
    assert f"{host}:{port}" in second.stderr and "in use" in second.stderr
    assert '"listening"' not in second.stdout
    assert describe(first.address).framework == "fake"  # the first one still serves, alone


@pytest.mark.frameworks
def test_a_torch_runner_refused_at_start_up_ends_with_its_reason(start):
    # Not followed by the ~30 lines of nanobind "leaked" warnings that triton, loaded with torch, prints at an
    # interpreter's teardown.
    port = start().address.rsplit(":", 1)[1]
    command = embedded_command("torch", default_venvs(), address=f"127.0.0.1:{port}")
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].startswith(f"cannot listen on 127.0.0.1:{port}: the port is in use"), (
        done.stderr
    )
    assert "leaked" not in done.stderr


# --- start-up checks -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags, expected",
    [
        (lambda p: ["--tls-key", str(p.server_key)], "--tls-cert and --tls-key go together"),
        (lambda p: ["--tls-cert", str(p.server_cert)], "--tls-cert and --tls-key go together"),
        (lambda p: ["--tls-client-ca", str(p.ca)], "--tls-client-ca needs --tls-cert"),
        (
            lambda p: ["--tls-cert", str(p.server_cert), "--tls-key", "/no/such/key.pem"],
            "--tls-key /no/such/key.pem: cannot be read: No such file or directory",
        ),
        (
            lambda p: ["--tls-cert", str(p.server_cert), "--tls-key", str(p.client_key)],
            "the key is not the certificate's",
        ),
        (lambda p: [*p.server_flags(), "--tls-client-ca", str(p.token_file)], "holds no PEM CA certificate"),
        (lambda p: ["--token-file", str(p.ca.parent / "missing")], "--token-file"),
        (lambda p: ["--token-file", str(p.ca)], "a token is one word"),
    ],
    ids=[
        "key-without-cert",
        "cert-without-key",
        "client-ca-without-cert",
        "unreadable-key",
        "mismatched-key",
        "client-ca-not-pem",
        "missing-token-file",
        "token-file-not-a-token",
    ],
)
def test_a_setting_that_cannot_work_stops_the_runner_at_start_up(pki, flags, expected):
    done = runner_process(*flags(pki))
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr


def test_a_short_token_is_refused_at_start_up(tmp_path):
    (tmp_path / "token").write_text("secret\n")
    done = runner_process("--token-file", str(tmp_path / "token"))
    assert done.returncode == 2 and "at least 16" in done.stderr


def test_the_options_come_from_the_environment_too(pki):
    done = runner_process(env={access.TLS_KEY_ENV: str(pki.server_key)})
    assert done.returncode == 2 and "--tls-cert and --tls-key go together" in done.stderr


# --- TLS -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_runner(start, pki) -> str:
    return start(*pki.server_flags(), transport=pki.transport()).address


def test_tls_serves_a_client_that_trusts_its_ca(tls_runner, pki):
    assert describe(tls_runner, pki.transport()).framework == "fake"


def test_tls_turns_a_plaintext_client_away_naming_the_tls_options(tls_runner):
    failure = refusal(tls_runner)
    assert failure.code == "UNAVAILABLE" and "--tls-ca" in failure.message


def test_tls_fails_the_handshake_for_a_client_trusting_another_ca(tls_runner, pki):
    failure = refusal(tls_runner, Transport.from_files(pki.other_ca, None, None, None))
    assert failure.code == "UNAVAILABLE"
    assert "TLS handshake failed" in failure.message and "--tls-ca" in failure.message


def test_a_tls_client_names_tls_against_a_plaintext_runner(start, pki):
    plain = start().address
    failure = refusal(plain, pki.transport())
    assert "TLS handshake failed" in failure.message and "serves TLS" in failure.message


def test_a_runner_lost_during_a_call_is_not_blamed_on_tls():
    message = Transport().explain(grpc.StatusCode.UNAVAILABLE, "Stream removed (Socket closed)")
    assert message == "runner unreachable (Stream removed (Socket closed))"


@pytest.fixture(scope="module")
def mtls_runner(start, pki) -> str:
    return start(*pki.server_flags(client_ca=True), transport=pki.transport(client=True)).address


def test_mutual_tls_accepts_a_client_certificate_signed_by_its_client_ca(mtls_runner, pki):
    assert describe(mtls_runner, pki.transport(client=True)).framework == "fake"


@pytest.mark.parametrize("client", [dict(), dict(stranger=True)], ids=["no-certificate", "certificate-of-another-ca"])
def test_mutual_tls_refuses_a_client_without_a_certificate_it_trusts(mtls_runner, pki, client):
    failure = refusal(mtls_runner, pki.transport(**client))
    assert failure.code == "UNAVAILABLE" and "--tls-cert" in failure.message


# --- the token -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def token_runner(start, pki) -> str:
    return start("--token-file", str(pki.token_file)).address


def test_a_call_without_the_token_is_unauthenticated_and_says_how_to_give_it(token_runner):
    failure = refusal(token_runner)
    assert failure.code == "UNAUTHENTICATED"
    assert "needs a token" in failure.message and "--token-file" in failure.message
    with grpc.insecure_channel(token_runner) as channel, pytest.raises(grpc.RpcError) as raw:
        pb_grpc.RunnerStub(channel).Describe(pb.DescribeRequest(), timeout=RPC_TIMEOUT_S)
    # What a client other than fwbench (grpcurl) reads.
    assert raw.value.code() == grpc.StatusCode.UNAUTHENTICATED and "authorization: Bearer" in raw.value.details()


def test_a_wrong_token_is_unauthenticated(token_runner, pki):
    failure = refusal(token_runner, pki.transport(ca=False, token=pki.wrong_token_file))
    assert failure.code == "UNAUTHENTICATED" and "does not accept the token" in failure.message


def test_the_right_token_is_accepted_without_tls(token_runner, pki):
    transport = pki.transport(ca=False, token=pki.token_file)
    assert describe(token_runner, transport).framework == "fake"
    with RunnerClient("fake", token_runner, transport) as client:
        assert client.run(RUN).summary.measured_steps == 2  # a streaming call carries it too


def test_without_the_token_a_run_is_refused_before_it_starts(token_runner):
    with grpc.insecure_channel(token_runner) as channel, pytest.raises(grpc.RpcError) as raw:
        list(pb_grpc.RunnerStub(channel).Run(RUN, timeout=RPC_TIMEOUT_S))
    assert raw.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # Bytes that are no RunRequest at all get the same answer: an unauthenticated request is never decoded.
    with grpc.insecure_channel(token_runner) as channel, pytest.raises(grpc.RpcError) as raw:
        list(channel.unary_stream("/fwbench.runner.v1.Runner/Run")(b"\xff\xff\xff", timeout=RPC_TIMEOUT_S))
    assert raw.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_the_health_check_is_open_and_reflection_is_not(token_runner):
    with grpc.insecure_channel(token_runner) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=RPC_TIMEOUT_S)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        with pytest.raises(grpc.RpcError) as raw:
            list(
                reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
                    iter([request]), timeout=RPC_TIMEOUT_S
                )
            )
        assert raw.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_an_embedded_runner_requires_a_token_from_the_environment_and_ignores_the_aggregators_settings(
    start, pki, monkeypatch
):
    # The aggregator's own settings would otherwise reach the runner it starts, which inherits its environment.
    for name, value in ((connection.TOKEN_FILE_ENV, pki.token_file), (connection.TLS_CERT_ENV, pki.client_cert)):
        monkeypatch.setenv(name, str(value))
    runner = start(env=connection.embedded_runner_env(), transport=connection.EMBEDDED)
    assert describe(runner.address, connection.EMBEDDED).framework == "fake"
    assert refusal(runner.address).code == "UNAUTHENTICATED"
    assert refusal(runner.address, pki.transport(ca=False, token=pki.token_file)).code == "UNAUTHENTICATED"
    command_line = Path(f"/proc/{runner.process.pid}/cmdline").read_bytes()
    assert connection.EMBEDDED.token.encode() not in command_line


# --- the container health probe ------------------------------------------------------------------


def healthcheck(address: str, env: dict) -> subprocess.CompletedProcess:
    port = address.rsplit(":", 1)[1]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FWBENCH_")}
    return subprocess.run(
        [sys.executable, "-m", "fwbench_core.healthcheck"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, server.ADDRESS_ENV: f"0.0.0.0:{port}", **env},
    )


def test_the_health_probe_needs_no_token(token_runner):
    done = healthcheck(token_runner, {access.TOKEN_FILE_ENV: "/the/probe/never/reads/it"})
    assert done.returncode == 0, done.stderr


def test_the_health_probe_speaks_tls_to_a_tls_runner_with_client_certificates(mtls_runner, pki):
    # The probe runs in the runner's container, with the runner's environment.
    runner_env = {
        access.TLS_CERT_ENV: str(pki.server_cert),
        access.TLS_KEY_ENV: str(pki.server_key),
        access.TLS_CLIENT_CA_ENV: str(pki.ca),
    }
    done = healthcheck(mtls_runner, runner_env)
    assert done.returncode == 1 and "FWBENCH_TLS_CA" in done.stderr
    done = healthcheck(mtls_runner, {**runner_env, "FWBENCH_TLS_CA": str(pki.ca)})
    assert done.returncode == 0, done.stderr
    assert "SERVING" in done.stdout


# --- the CLI -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def guarded_runner(start, pki) -> str:
    """Mutual TLS and a token: everything at once."""
    transport = pki.transport(client=True, token=pki.token_file)
    return start(*pki.server_flags(client_ca=True), "--token-file", str(pki.token_file), transport=transport).address


@pytest.mark.slow
def test_the_cli_reaches_a_guarded_runner_with_its_options(guarded_runner, pki):
    done = fwbench(
        "describe",
        "--runner",
        f"fake={guarded_runner}",
        "--tls-ca",
        str(pki.ca),
        "--tls-cert",
        str(pki.client_cert),
        "--tls-key",
        str(pki.client_key),
        "--token-file",
        str(pki.token_file),
        clean=True,
    )
    assert done.returncode == 0, done.stderr
    assert "fake" in done.stdout and guarded_runner in done.stdout


@pytest.mark.slow
def test_the_cli_reads_its_options_from_the_environment(guarded_runner, pki):
    env = {
        "FWBENCH_RUNNERS": f"fake={guarded_runner}",
        "FWBENCH_TLS_CA": str(pki.ca),
        "FWBENCH_TLS_CERT": str(pki.client_cert),
        "FWBENCH_TLS_KEY": str(pki.client_key),
        "FWBENCH_TOKEN_FILE": str(pki.token_file),
    }
    done = fwbench("models", env=env, clean=True)
    assert done.returncode == 0, done.stderr
    assert "resnet18" in done.stdout


@pytest.mark.slow
def test_the_cli_without_tls_options_names_them(guarded_runner):
    done = fwbench("describe", "--runner", f"fake={guarded_runner}", clean=True)
    assert done.returncode == 1
    assert "runner fake failed" in done.stderr and "--tls-ca" in done.stderr


@pytest.mark.slow
def test_the_cli_without_the_token_names_the_token_option(guarded_runner, pki):
    done = fwbench(
        "describe",
        "--runner",
        f"fake={guarded_runner}",
        "--tls-ca",
        str(pki.ca),
        "--tls-cert",
        str(pki.client_cert),
        "--tls-key",
        str(pki.client_key),
        clean=True,
    )
    assert done.returncode == 1
    assert "UNAUTHENTICATED" in done.stderr and "needs a token" in done.stderr and "--token-file" in done.stderr


@pytest.mark.parametrize(
    "args, expected",
    [
        (lambda p: ["--tls-cert", str(p.client_cert)], "--tls-cert and --tls-key go together"),
        (lambda p: ["--tls-ca", "/no/such/ca.pem"], "--tls-ca"),
        (lambda p: ["--tls-ca", str(p.token_file)], "holds no PEM CA certificate"),
        (lambda p: ["--token-file", str(p.ca)], "holds no token"),
    ],
    ids=["cert-without-key", "missing-ca", "ca-not-pem", "not-a-token"],
)
@pytest.mark.slow
def test_the_cli_refuses_unusable_access_options_before_contacting_a_runner(pki, args, expected):
    done = fwbench("describe", "--runner", "fake=127.0.0.1:9", *args(pki), clean=True)
    assert done.returncode == 2
    assert expected in done.stderr
