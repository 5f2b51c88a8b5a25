"""The container path: the Dockerfiles and Compose files, and the whole stack on a real Docker engine.

The static checks (hadolint, the Compose specification's schema, what the overrides merge into) run
everywhere. The end-to-end tests need a Docker engine and no registry: the framework base images are
made here (tests/containers/base_images.sh: debootstrap, `docker import`, the framework from PyPI),
then the project's own Dockerfiles and compose.yaml build and start everything (the JAX runner with its
profile), the aggregator's container benchmarks the runners' containers, and one runner is rebuilt on a
second framework version. Where no Docker engine answers they are skipped, and the skip says so in capitals.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest
import yaml
from support.docker import skip_without_docker_engine
from support.timings import timed

from fwbench_aggregator.base.frameworks import shipped
from fwbench_aggregator.run import launch
from fwbench_aggregator.store.results_store import ResultStore

ROOT = Path(__file__).resolve().parent.parent
TOOLS = Path(sys.executable).parent  # hadolint, check-jsonschema and docker-compose come with the test environment
FRAMEWORKS = shipped()
RUNNERS = tuple(f.name for f in FRAMEWORKS)
BY_NAME = {f.name: f for f in FRAMEWORKS}
# The runners `docker compose up` starts and the aggregator's service compares; the others start with their
# profile (docker compose --profile jax up).
COMPARED = tuple(f.name for f in FRAMEWORKS if f.compared_by_default)
OPT_IN = tuple(f.name for f in FRAMEWORKS if not f.compared_by_default)
# The frameworks with an image of their own; a Keras runner runs its backend's (the framework its environment names).
IMAGED = tuple(f for f in FRAMEWORKS if f.owns_environment)
DOCKERFILES = (*(f"{f.folder}/Dockerfile" for f in IMAGED), "aggregator/Dockerfile", "tests/slurm/Dockerfile")


def dockerfile_of(framework) -> Path:
    """The Dockerfile of the image its runner runs in."""
    return ROOT / next(f.folder for f in IMAGED if f.name == framework.environment) / "Dockerfile"


BASE_IMAGES = ROOT / "tests" / "containers" / "base_images.sh"
SECOND_NODES = {name: f"{name}-node1" for name in COMPARED}  # compose.nodes.yaml's second runner of each

# The second TensorFlow version the swap test rebuilds on, with an older protobuf major than the
# first one's: the runner's stubs must be generated for whatever protobuf the image carries.
SECOND_TENSORFLOW = ("2.20.0", ["tensorflow==2.20.0", "protobuf==5.29.5"])

PROJECT = "fwbench-ci"
IMAGE_PREFIX = "fwbench-ci-test"
UID = 1000  # the non-root user compose runs every service as (FWBENCH_UID in .env)
BUILD_TIMEOUT_S = 1800
UP_TIMEOUT_S = 600
RUN_TIMEOUT_S = 600
# One job per framework across its two runner containers (compose.nodes.yaml), one CPU device each.
DISTRIBUTED_STRATEGIES = {"torch": "ddp", "tensorflow": "multi_worker_mirrored"}
DISTRIBUTED_RUN = [
    "--model",
    "mobilenet_v2",
    "--batch-size",
    "2",
    "--shape",
    "3x32x32",
    "--warmup",
    "2",
    "--steps",
    "5",
    "--min-measure-s",
    "0",
    "--repetitions",
    "1",
    "--devices",
    "cpu:0",
    *(arg for name, strategy in DISTRIBUTED_STRATEGIES.items() for arg in ("--strategy", f"{name}={strategy}")),
]
SMALL_RUN = [
    "--model",
    "resnet18",
    "--batch-size",
    "2",
    "--shape",
    "3x64x64",
    "--warmup",
    "2",
    "--steps",
    "5",
    "--min-measure-s",
    "0",
    "--repetitions",
    "1",
]


def run(
    command: list, timeout: float = 120, env: dict | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, command))} exited {done.returncode}\n--- stdout ---\n{done.stdout[-6000:]}"
            f"\n--- stderr ---\n{done.stderr[-6000:]}",
            pytrace=False,
        )
    return done


def dotenv() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (ROOT / ".env").read_text().splitlines() if re.match(r"^[A-Z_]+=", line))
    return {name: value for name, value in pairs}


def compose_env(**overrides: str) -> dict[str, str]:
    """A clean environment for docker-compose: the host's PATH and Docker settings and the test's own
    variables; nothing inherited overrides .env, which compose reads itself."""
    keep = {
        name: value for name, value in os.environ.items() if name in ("PATH", "HOME", "DOCKER_HOST", "DOCKER_CONFIG")
    }
    return {**keep, **overrides}


def compose_config(*files: str, profiles: tuple[str, ...] = OPT_IN) -> dict:
    """The merged configuration, every runner's profile active unless `profiles` says otherwise."""
    args = [TOOLS / "docker-compose", "--profile", "aggregator", *(arg for p in profiles for arg in ("--profile", p))]
    for name in ("compose.yaml", *files):
        args += ["-f", name]
    return yaml.safe_load(run([*args, "config"], env=compose_env()).stdout)


# --- static checks ------------------------------------------------------------------


def test_dockerfiles_pass_hadolint():
    done = run([TOOLS / "hadolint", *DOCKERFILES], check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_compose_file_follows_the_compose_specification():
    done = run([TOOLS / "check-jsonschema", "--builtin-schema", "vendor.compose-spec", "compose.yaml"], check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    "overrides",
    [
        ["compose.cpu.yaml"],
        ["compose.ports.yaml"],
        ["compose.cpu.yaml", "compose.ports.yaml"],
        ["compose.cpu.yaml", "compose.nodes.yaml"],
        ["compose.cpu.yaml", "compose.ports.yaml", "compose.nodes.yaml"],
    ],
)
def test_overrides_merge_into_a_file_that_follows_the_specification(tmp_path, overrides):
    merged = tmp_path / "merged.yaml"
    merged.write_text(yaml.safe_dump(compose_config(*overrides)))
    done = run([TOOLS / "check-jsonschema", "--builtin-schema", "vendor.compose-spec", merged], check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_runners_reserve_every_gpu_on_an_internal_network_with_no_published_port():
    config = compose_config()
    assert config["networks"]["runners"]["internal"] is True
    for name in RUNNERS:
        service = config["services"][name]
        [gpus] = service["deploy"]["resources"]["reservations"]["devices"]
        assert gpus["driver"] == "nvidia" and gpus["capabilities"] == ["gpu"]
        assert gpus["count"] in ("all", -1)  # compose writes "all" as -1
        assert list(service["networks"]) == ["runners"]
        assert "ports" not in service


def test_runners_share_one_reference_volume_at_the_folder_they_are_told_and_their_images_make():
    config = compose_config()
    assert "references" in config["volumes"]
    for framework in FRAMEWORKS:
        service = config["services"][framework.name]
        [volume] = [v for v in service["volumes"] if v["type"] == "volume"]
        assert volume["source"] == "references"
        assert service["environment"]["FWBENCH_REFERENCE_DIR"] == volume["target"]
        assert f"install -d -m 1777 {volume['target']}" in dockerfile_of(framework).read_text()


def test_every_runner_reads_the_hosts_model_plugins_read_only_at_the_folder_it_is_told():
    config = compose_config()
    for framework in FRAMEWORKS:
        service = config["services"][framework.name]
        [mount] = [v for v in service["volumes"] if v["type"] == "bind"]
        assert mount["source"] == str(ROOT / "models") and mount.get("read_only") is True
        assert service["environment"]["FWBENCH_MODELS_DIR"] == mount["target"]


def test_every_image_is_built_here_and_never_pulled():
    services = compose_config()["services"]
    assert {name: service["pull_policy"] for name, service in services.items()} == {
        name: "build" for name in (*RUNNERS, "aggregator")
    }


def test_cpu_override_drops_only_the_gpu_reservation():
    default, cpu = compose_config(), compose_config("compose.cpu.yaml")
    for name in RUNNERS:
        assert "deploy" not in cpu["services"][name]
        assert {k: v for k, v in default["services"][name].items() if k != "deploy"} == cpu["services"][name]


def test_aggregator_waits_for_every_runner_to_be_healthy_and_writes_to_the_host():
    service = compose_config()["services"]["aggregator"]
    assert {name: dep["condition"] for name, dep in service["depends_on"].items()} == {
        name: "service_healthy" for name in COMPARED
    }
    assert [v["target"] for v in service["volumes"]] == ["/results"]
    # Every runner, so that --frameworks can name one not compared by default; the default commands skip it.
    assert service["environment"]["FWBENCH_RUNNERS"] == " ".join(f"{name}={name}:50051" for name in RUNNERS)


def test_a_runner_not_compared_by_default_starts_only_with_its_profile():
    assert set(compose_config(profiles=())["services"]) == {*COMPARED, "aggregator"}
    for name in OPT_IN:
        assert compose_config(profiles=(name,))["services"][name]["profiles"] == [name]


def test_nodes_override_adds_a_second_runner_per_framework_that_publishes_nothing():
    config = compose_config("compose.cpu.yaml", "compose.ports.yaml", "compose.nodes.yaml")
    services = config["services"]
    for name in COMPARED:
        first, second = services[name], services[SECOND_NODES[name]]
        # The same runner under another name, on the internal network only: the rendezvous ports stay there.
        assert {k: v for k, v in first.items() if k not in ("networks", "ports")} == {
            k: v for k, v in second.items() if k != "networks"
        }
        assert list(second["networks"]) == ["runners"] and "ports" not in second
        assert "deploy" not in compose_config("compose.nodes.yaml")["services"][SECOND_NODES[name]]
    aggregator = services["aggregator"]
    assert set(aggregator["depends_on"]) == {*COMPARED, *SECOND_NODES.values()}
    # Each framework is one job across its two runners, node 0 first; the others keep their one runner.
    assert aggregator["environment"]["FWBENCH_RUNNERS"] == " ".join(
        f"{name}={name}:50051" + (f",{SECOND_NODES[name]}:50051" if name in SECOND_NODES else "") for name in RUNNERS
    )


@pytest.mark.parametrize("framework", IMAGED, ids=[f.name for f in IMAGED])
def test_dockerfile_default_base_image_is_the_one_env_names(framework):
    # Two places name the official image: the Dockerfile (plain docker build) and .env (compose).
    base_variable = framework.variable
    dockerfile = (ROOT / framework.folder / "Dockerfile").read_text()
    default = re.search(r"^ARG BASE_IMAGE=(\S+)$", dockerfile, re.M).group(1)
    env = dotenv()
    assert default == f"{env[f'{base_variable}_BASE_IMAGE']}:{env[f'{base_variable}_TAG']}"


def test_swapping_a_version_is_one_variable():
    env = dotenv()
    config = yaml.safe_load(
        run([TOOLS / "docker-compose", "config"], env=compose_env(TENSORFLOW_TAG="2.99.0-gpu")).stdout
    )
    tensorflow = config["services"]["tensorflow"]
    assert tensorflow["build"]["args"]["BASE_IMAGE"] == f"{env['TENSORFLOW_BASE_IMAGE']}:2.99.0-gpu"
    assert tensorflow["image"].endswith("/tensorflow-runner:2.99.0-gpu")
    assert tensorflow["environment"]["FWBENCH_IMAGE"] == tensorflow["image"]


# --- the stack on a real Docker engine -------------------------------------------------


def pinned(requirements: str, package: str) -> str:
    text = (ROOT / requirements).read_text()
    return re.search(rf"^{re.escape(package)}==(\S+)$", text, re.M).group(1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Stack:
    """compose.yaml with the CPU and published-ports overrides, on base images made here."""

    def __init__(self, results_dir: Path) -> None:
        self.results_dir = results_dir
        self.torch_version = pinned("runners/torch/requirements.txt", "torch")
        self.torchvision_version = pinned("runners/torch/requirements.txt", "torchvision")
        self.tensorflow_version = pinned("runners/tensorflow/requirements.txt", "tensorflow")
        self.jax_version = pinned("runners/jax/requirements.txt", "jax")
        self.ports = {name: free_port() for name in RUNNERS}
        self.overrides: tuple[str, ...] = ()  # Compose files a test adds to the stack's
        self.variables = {
            "TORCH_BASE_IMAGE": "fwbench-ci/pytorch",
            "TORCH_TAG": self.torch_version,
            "TENSORFLOW_BASE_IMAGE": "fwbench-ci/tensorflow",
            "TENSORFLOW_TAG": self.tensorflow_version,
            "JAX_BASE_IMAGE": "fwbench-ci/jax",
            "JAX_TAG": self.jax_version,
            "AGGREGATOR_BASE_IMAGE": "fwbench-ci/python:3.11",
            "FWBENCH_IMAGE_PREFIX": IMAGE_PREFIX,
            "FWBENCH_RESULTS_DIR": str(results_dir),
            # Every runner container serves the example model plug-ins, mounted from the host.
            "FWBENCH_MODELS_DIR": str(ROOT / "examples" / "models"),
            "FWBENCH_UID": str(UID),
            "FWBENCH_GID": str(UID),
            **{f"{BY_NAME[name].variable}_RUNNER_PORT": str(port) for name, port in self.ports.items()},
        }

    def compose(
        self, *args: str, timeout: float = RUN_TIMEOUT_S, check: bool = True, **variables: str
    ) -> subprocess.CompletedProcess:
        """docker-compose on the stack's files, with the stack's variables (`variables` in place of some)."""
        files = ("compose.yaml", "compose.cpu.yaml", "compose.ports.yaml", *self.overrides)
        # Every runner's profile: the stack runs all of them, and `down` leaves none behind.
        profiles = (arg for name in OPT_IN for arg in ("--profile", name))
        command = [
            TOOLS / "docker-compose",
            "-p",
            PROJECT,
            *(arg for f in files for arg in ("-f", f)),
            *profiles,
            *args,
        ]
        return run(command, timeout=timeout, env=compose_env(**{**self.variables, **variables}), check=check)

    def build(self) -> None:
        """Every image of the stack, and the second TensorFlow's runner beside them: each build waits on copying
        files and committing layers more than on the CPU, so the second TensorFlow's (about 270 s alone, in its
        test, after the others) costs little more beside them; its test then finds it built, as a user who
        has built that tag before would. The aggregator's is built beside the runners' too: it depends on them in
        compose.yaml, so one `build` of them all started it only once they were built (190 s later in a CI run)."""
        second, _ = SECOND_TENSORFLOW
        with (
            timed("image", f"compose build (every runner, the aggregator, and tensorflow {second}'s runner)"),
            ThreadPoolExecutor(2) as pool,
        ):
            others = [
                pool.submit(self.compose, "build", "tensorflow", timeout=BUILD_TIMEOUT_S, TENSORFLOW_TAG=second),
                pool.submit(self.compose, "--profile", "aggregator", "build", "aggregator", timeout=BUILD_TIMEOUT_S),
            ]
            # The images' owners first, then the Keras runners' services, which build the same Dockerfiles to the
            # same tags: in one `build` each image was built twice at once, neither with the other's cache.
            self.compose("build", *(f.name for f in IMAGED), timeout=BUILD_TIMEOUT_S)
            self.compose("build", *(f.name for f in FRAMEWORKS if not f.owns_environment), timeout=BUILD_TIMEOUT_S)
            for other in others:
                other.result()

    def make_base_images(self) -> None:
        # Each framework's base from its embedded environment's lock, with uv from set-up's cache: the runner images
        # then carry the same framework and dependencies as the embedded runners, and nothing is downloaded twice.
        venvs = launch.default_venvs()
        uv = {"FWBENCH_UV": str(venvs / ".uv" / "bin" / "uv")} if (venvs / ".uv" / "bin" / "uv").exists() else {}

        def make(label: str, lock: str | None, *args: str) -> None:
            env = {**os.environ, **uv, **({"FWBENCH_BASE_LOCK": str(ROOT / lock)} if lock else {})}
            with timed("image", label):
                run(["bash", BASE_IMAGES, *args], timeout=BUILD_TIMEOUT_S, env=env)

        make("base fwbench-ci/python:3.11", None, "python")
        version, packages = SECOND_TENSORFLOW
        frameworks = [
            (
                f"base fwbench-ci/pytorch:{self.torch_version}",
                "runners/torch/requirements.lock",
                "torch",
                self.torch_version,
                f"torch=={self.torch_version}",
                f"torchvision=={self.torchvision_version}",
            ),
            (
                f"base fwbench-ci/tensorflow:{self.tensorflow_version}",
                "runners/tensorflow/requirements.lock",
                "tensorflow",
                self.tensorflow_version,
                f"tensorflow=={self.tensorflow_version}",
            ),
            # The second TensorFlow has its own pins (an older protobuf): no lock of ours fits it.
            (f"base fwbench-ci/tensorflow:{version}", None, "tensorflow", version, *packages),
            # Like NVIDIA's JAX image: JAX with Flax and optax (here the CPU build, which PyPI's jax is).
            (
                f"base fwbench-ci/jax:{self.jax_version}",
                "runners/jax/requirements.lock",
                "jax",
                self.jax_version,
                f"jax=={self.jax_version}",
                *(f"{name}=={pinned('runners/jax/requirements.txt', name)}" for name in ("jaxlib", "flax", "optax")),
            ),
        ]
        # The framework bases all at once, on the one Python base: each waits on uv copying files into a container
        # and on `docker commit` writing a layer, far more than on the CPU.
        with (
            timed("image", f"{len(frameworks)} framework bases, concurrently"),
            ThreadPoolExecutor(len(frameworks)) as pool,
        ):
            for done in [pool.submit(make, *recipe) for recipe in frameworks]:
                done.result()

    def image(self, service: str) -> str:
        """The image a runner's service runs: its own framework's, or (a Keras runner) its environment's."""
        owner = BY_NAME[BY_NAME[service].environment]
        return f"{IMAGE_PREFIX}/{owner.name}-runner:{self.variables[f'{owner.variable}_TAG']}"

    def health(self, service: str) -> str:
        container = self.compose("ps", "-q", service).stdout.strip()
        return run(["docker", "inspect", "--format", "{{.State.Health.Status}}", container]).stdout.strip()

    def aggregator(self, *args: str) -> subprocess.CompletedProcess:
        # A wide terminal, so that a listing's table keeps a row per model (six runners' names stack it at 80).
        return self.compose("--profile", "aggregator", "run", "--rm", "-e", "COLUMNS=200", "aggregator", *args)

    def processes(self, service: str) -> list[str]:
        """The command lines running in a service's container, its health probes left out."""
        container = self.compose("ps", "-q", service).stdout.strip()
        rows = run(["docker", "top", container, "-o", "pid,args"]).stdout.splitlines()[1:]
        commands = (row.split(maxsplit=1)[1] for row in rows)
        return [command for command in commands if "fwbench_core.healthcheck" not in command]

    def listening_ports(self, service: str) -> set[int]:
        """The TCP ports the runner's user listens on in a service's container (read from /proc/net)."""
        table = self.compose("exec", "-T", service, "cat", "/proc/net/tcp", "/proc/net/tcp6").stdout
        rows = [line.split() for line in table.splitlines()]
        # A socket's row: "N: LOCAL_HEX_ADDRESS:HEX_PORT REMOTE STATE ... UID ..."; state 0A is LISTEN. The
        # headers start "sl"; Docker's embedded DNS listens in the container too, as root.
        return {
            int(row[1].rsplit(":", 1)[1], 16)
            for row in rows
            if row[0] != "sl" and row[3] == "0A" and row[7] == str(UID)
        }

    def newest_comparison(self) -> tuple[Path, pd.DataFrame]:
        folder = max((p.parent for p in self.results_dir.glob("*/comparison.csv")), key=lambda p: p.stat().st_mtime)
        return folder, pd.read_csv(folder / "comparison.csv")

    def leftovers(self) -> list[str]:
        label = f"label=com.docker.compose.project={PROJECT}"
        containers = run(["docker", "ps", "-aq", "--filter", label]).stdout.split()
        networks = run(["docker", "network", "ls", "-q", "--filter", label]).stdout.split()
        return containers + networks


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    skip_without_docker_engine("CONTAINER")
    results_dir = tmp_path_factory.mktemp("container-results")
    shutil.chown(results_dir, UID, UID)
    stack = Stack(results_dir)
    stack.compose("--profile", "aggregator", "down", "--remove-orphans", "--volumes", timeout=UP_TIMEOUT_S)
    stack.make_base_images()
    stack.build()
    stack.compose("up", "-d", "--wait", "--wait-timeout", str(UP_TIMEOUT_S - 60), timeout=UP_TIMEOUT_S)
    yield stack
    stack.compose("--profile", "aggregator", "down", "--remove-orphans", "--volumes", timeout=UP_TIMEOUT_S, check=False)


@pytest.mark.containers
def test_every_runner_comes_up_healthy_as_a_non_root_user(stack):
    for service in RUNNERS:
        assert stack.health(service) == "healthy"
        assert stack.compose("exec", "-T", service, "id", "-u").stdout.strip() == str(UID)
        image_user = run(["docker", "image", "inspect", "--format", "{{.Config.User}}", stack.image(service)]).stdout
        assert image_user.strip() == "10001:10001"


@pytest.mark.containers
def test_the_runner_layer_moves_no_package_of_the_base_image(stack):
    for service in (f.name for f in IMAGED):
        listing = run(
            [
                "docker",
                "run",
                "--rm",
                "--entrypoint",
                "sh",
                stack.image(service),
                "-c",
                "cat /opt/fwbench/base-packages.txt; echo ---; cat /opt/fwbench/packages.txt",
            ]
        ).stdout
        base, final = (set(part.split()) for part in listing.split("---"))
        assert base <= final
        assert any(line.startswith("fwbench-core==") for line in final - base)


@pytest.mark.containers
def test_aggregator_container_compares_the_runner_containers_it_is_told_to(stack):
    stack.aggregator("compare", *SMALL_RUN, "--frameworks", ",".join(RUNNERS), "--out", "/results")
    folder, table = stack.newest_comparison()
    rows = table.set_index("framework")
    assert set(rows.index) == set(RUNNERS)
    assert rows.loc["torch", "framework_version"].startswith(stack.torch_version)
    assert rows.loc["tensorflow", "framework_version"] == stack.tensorflow_version
    assert rows.loc["jax", "framework_version"] == stack.jax_version
    for service in RUNNERS:  # the compose services are named after their frameworks
        assert rows.loc[service, "container_image"] == stack.image(service)
        assert rows.loc[service, "median_step_ms"] > 0
    manifest = json.loads((folder / "manifest.json").read_text())
    recorded = json.dumps(manifest)
    assert f"fwbench-ci/pytorch:{stack.torch_version}" in recorded  # the base image, from the Dockerfile
    assert stack.image("tensorflow") in recorded
    # Both containers report this machine's kernel boot id, so a sweep runs them one after the other.
    assert recorded.count(Path("/proc/sys/kernel/random/boot_id").read_text().strip()) >= 2


@pytest.mark.containers
def test_parity_exchanges_weights_between_the_containers(stack):
    stack.aggregator("parity", "--models", "resnet18", "--frameworks", ",".join(RUNNERS), "--out", "/results")
    parity = pd.read_csv(next(stack.results_dir.glob("*-parity/parity.csv")))
    assert set(parity["other"]) == set(RUNNERS[1:])  # each against the first, through the shared volume
    assert set(parity["verdict"]) == {"same"}, parity.to_dict("records")


@pytest.mark.containers
def test_a_model_plugin_on_the_host_is_compared_and_checked_in_every_runner_container(stack):
    listing = stack.aggregator("models", "--frameworks", ",".join(RUNNERS)).stdout
    assert re.search(r"tiny_cnn \*.*\ball\b", listing), listing
    assert "tiny_cnn: plug-in /models/tiny_cnn (FWBENCH_MODELS_DIR, sha256:" in listing
    stack.aggregator(
        "parity",
        "--models",
        "tiny_cnn",
        "--frameworks",
        ",".join(RUNNERS),
        "--out",
        "/results",
        "--store",
        "/results/store",
    )
    stack.aggregator(
        "compare", "--model", "tiny_cnn", *SMALL_RUN[2:], "--frameworks", ",".join(RUNNERS), "--out", "/results"
    )
    _, table = stack.newest_comparison()
    assert set(table["model"]) == {"tiny_cnn"} and set(table["framework"]) == set(RUNNERS)
    assert set(table["model_source"]) == {"/models/tiny_cnn (FWBENCH_MODELS_DIR)"}
    assert table["model_hash"].str.startswith("sha256:").all() and table["model_hash"].nunique() == 1
    assert set(table["parity"]) == {"parity checked"}, table[["runner", "parity"]]


@pytest.mark.containers
def test_host_aggregator_reaches_the_published_runners(stack):
    done = run(
        [TOOLS / "fwbench", "describe", *(f"--runner={name}=127.0.0.1:{port}" for name, port in stack.ports.items())],
        timeout=RUN_TIMEOUT_S,
    )
    assert stack.torch_version in done.stdout and stack.tensorflow_version in done.stdout
    assert stack.jax_version in done.stdout


@pytest.mark.containers
def test_one_job_spans_two_runner_containers_per_framework(stack):
    """torch DDP and TensorFlow MultiWorkerMirrored, each across two runner containers as two machines:
    the frameworks' own rendezvous over the compose network, then nothing left in any container."""
    stack.overrides = ("compose.nodes.yaml",)
    try:
        stack.compose(
            "up", "-d", "--wait", "--wait-timeout", str(UP_TIMEOUT_S - 60), *SECOND_NODES.values(), timeout=UP_TIMEOUT_S
        )
        stack.aggregator("compare", *DISTRIBUTED_RUN, "--out", "/results")
        folder, _ = stack.newest_comparison()
        summary = pd.read_csv(folder / "summary.csv").set_index("framework")
        for name, strategy in DISTRIBUTED_STRATEGIES.items():
            run_summary = summary.loc[name]
            assert run_summary["status"] == "ok", run_summary.get("error")
            assert run_summary["strategy"] == strategy
            assert (run_summary["world_size"], run_summary["nodes"], run_summary["global_batch_size"]) == (2, 2, 4)
        steps = pd.read_csv(folder / "steps.csv", dtype={"rank_step_time_s": str})
        # Every step of each job carries both containers' times, the step's being the slower one.
        for step in steps.itertuples():
            rank_times = [float(t) for t in step.rank_step_time_s.split()]
            assert len(rank_times) == 2 and step.step_time_s == pytest.approx(max(rank_times), rel=1e-6)
        for framework in (f for f in FRAMEWORKS if f.compared_by_default):
            for service in (framework.name, SECOND_NODES[framework.name]):
                # The runner alone (with multiprocessing's resource tracker, which lives as long as it does).
                left = [p for p in stack.processes(service) if "multiprocessing.resource_tracker" not in p]
                assert left == [f"python3 -m {framework.module}"], f"{service} left a worker process"
                assert stack.listening_ports(service) == {50051}, f"{service} left a rendezvous port bound"
    finally:
        stack.compose("rm", "--stop", "--force", *SECOND_NODES.values(), check=False)
        stack.overrides = ()


@pytest.mark.containers
def test_a_new_tensorflow_tag_builds_its_own_runner_and_results_report_it(stack):
    """The tag is the one variable that changes (the stack built its image beside the others: the build here is
    the user's command, and finds it)."""
    version, _ = SECOND_TENSORFLOW
    first_version = stack.variables["TENSORFLOW_TAG"]
    stack.variables["TENSORFLOW_TAG"] = version
    try:
        stack.compose("build", "tensorflow", timeout=BUILD_TIMEOUT_S)
        stack.compose(
            "up", "-d", "--wait", "--wait-timeout", str(UP_TIMEOUT_S - 60), "tensorflow", timeout=UP_TIMEOUT_S
        )
        packages = run(
            ["docker", "run", "--rm", "--entrypoint", "cat", stack.image("tensorflow"), "/opt/fwbench/packages.txt"]
        ).stdout.split()
        assert f"tensorflow=={version}" in packages and "protobuf==5.29.5" in packages
        stack.aggregator("compare", *SMALL_RUN, "--out", "/results")
        _, table = stack.newest_comparison()
        rows = table.set_index("framework")
        assert set(rows.index) == set(COMPARED)  # a default comparison leaves the JAX runner out, though it is up
        assert rows.loc["tensorflow", "framework_version"] == version
        assert rows.loc["tensorflow", "container_image"] == f"{IMAGE_PREFIX}/tensorflow-runner:{version}"
        assert rows.loc["torch", "framework_version"].startswith(stack.torch_version)
    finally:
        stack.variables["TENSORFLOW_TAG"] = first_version


@pytest.mark.containers
def test_versions_side_by_side_run_through_the_generated_override_and_record_their_digests(stack, tmp_path):
    """Both TensorFlow versions and torch, one runner container per tag in the stack's Compose project
    (`fwbench versions up` over the generated override, without GPUs), one tiny study across them, the version
    report's rows, every image's digests in the results, and everything taken down (docs/versions.md)."""
    second, _ = SECOND_TENSORFLOW
    study = tmp_path / "versions.yaml"
    study.write_text(
        f"versions: {{tensorflow: ['{second}', '{stack.tensorflow_version}'], torch: ['{stack.torch_version}']}}\n"
        "models: [resnet18]\nmodes: [infer]\nbatch_sizes: [2]\nshapes: [3x32x32]\nwarmup: 1\nsteps: 3\n"
        "min_measure_s: 0\nrepetitions: 2\n"
    )
    store = tmp_path / "store"
    env = {
        **compose_env(**stack.variables),
        "COMPOSE_PROJECT_NAME": PROJECT,
        "FWBENCH_COMPOSE": str(TOOLS / "docker-compose"),
    }
    labels = [f"tensorflow@{second}", f"tensorflow@{stack.tensorflow_version}", f"torch@{stack.torch_version}"]
    ours = ["--filter", f"label=com.docker.compose.project={PROJECT}", "--filter", "label=fwbench.runner"]
    try:
        up = run(
            [TOOLS / "fwbench", "versions", "up", study, "--store", store, "--cpu"], timeout=BUILD_TIMEOUT_S, env=env
        )
        assert [value.split("=")[0] for value in up.stdout.split()[1::2]] == labels
        listed = run(["docker", "ps", *ours, "--format", '{{.Label "fwbench.runner"}}']).stdout.split()
        assert sorted(listed) == sorted(labels)
        sweep = run(
            [TOOLS / "fwbench", "sweep", study, "--store", store, "--no-confirm"], timeout=RUN_TIMEOUT_S, env=env
        )
        assert f"tensorflow {second} → {stack.tensorflow_version}: resnet18 infer b2" in " ".join(sweep.stdout.split())
        changes = pd.read_csv(store / "report" / "version_changes.csv")
        assert changes[["framework", "version_from", "version_to"]].values.tolist() == [
            ["tensorflow", second, stack.tensorflow_version]
        ]  # torch ran one version: no pair
        assert changes["runs_from"].tolist() == [2] and changes["change"].tolist() == [
            "unresolved"
        ]  # 2 runs decide nothing
        summary = pd.read_csv(store / "report" / "comparison.csv")
        assert set(summary["runner"]) == set(labels)
        runs = ResultStore(store).load("summary").set_index("runner")
        for label, tag, base in ((labels[0], second, "tensorflow"), (labels[2], stack.torch_version, "pytorch")):
            own = runs.loc[[label]]
            framework = label.split("@")[0]
            assert set(own["container_image"]) == {f"{IMAGE_PREFIX}/{framework}-runner:{tag}"}
            assert set(own["container_base_image"]) == {f"fwbench-ci/{base}:{tag}"}
            image_id = run(
                ["docker", "image", "inspect", "--format", "{{.Id}}", f"{IMAGE_PREFIX}/{framework}-runner:{tag}"]
            )
            assert set(own["image_digest"]) == {image_id.stdout.strip()}
            assert own["base_image_digest"].str.startswith("sha256:").all()
    finally:
        run([TOOLS / "fwbench", "versions", "down", study, "--store", store], env=env, check=False)
    assert run(["docker", "ps", "-aq", *ours]).stdout.split() == []


@pytest.mark.containers
def test_down_leaves_nothing_running(stack):
    stack.compose("--profile", "aggregator", "down", "--remove-orphans", "--volumes", timeout=UP_TIMEOUT_S)
    assert stack.leftovers() == []
