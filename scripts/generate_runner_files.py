"""Write every file that lists the runners, from the one runner list (aggregator/fwbench_aggregator/base/frameworks.toml):
each runner's Dockerfile (from runners/Dockerfile.in) and compose.yaml, compose.ports.yaml,
compose.cpu.yaml and compose.nodes.yaml. A Dockerfile's default base image is the one .env names.

    python3 scripts/generate_runner_files.py          # write them
    python3 scripts/generate_runner_files.py --check  # exit 1, naming each file that is out of date

Needs only the standard library (Python 3.11 or later).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "aggregator"))
from fwbench_aggregator.base.frameworks import (  # noqa: E402 (found through the path set above)
    Framework,
    environments,
    shipped,
)

GENERATED = "# Generated from aggregator/fwbench_aggregator/base/frameworks.toml by scripts/generate_runner_files.py: edit those, not this file.\n"
RUNNER_PORT = 50051  # every runner listens on it inside its container
REFERENCE_DIR = "/var/lib/fwbench/references"  # every runner's parity reference folder, made by its image
MODELS_DIR = "/models"  # where every runner finds the host's model plug-ins
SECOND_NODE = "node1"  # compose.nodes.yaml's second runner of FRAMEWORK is the service FRAMEWORK-node1

# What every runner service has, in compose.yaml (the x-runner anchor, with the GPUs) and in
# compose.nodes.yaml (written out: an anchor does not reach across files).
RUNNER_COMMON = """\
  restart: unless-stopped
  user: "${FWBENCH_UID:?set FWBENCH_UID in .env}:${FWBENCH_GID:?set FWBENCH_GID in .env}"
  networks: [runners]
  volumes:
    # Parity checks pass weight files from one runner to the other, by name, in this shared folder.
    - "references:{reference_dir}"
    # Your model plug-ins (docs/your-model.md), read-only: every runner loads them at start-up.
    - "${FWBENCH_MODELS_DIR:-./models}:{models_dir}:ro"
"""

COMPOSE_HEAD = """\
# The runners, each in its own framework image, on this host's NVIDIA GPUs:
#   docker compose up -d --wait                      # build if needed, start, wait until healthy
#   docker compose run --rm aggregator compare --model resnet50 --batch-size 64
# A runner not compared by default starts with its profile: docker compose --profile jax up -d --wait
# Hosts without a GPU add the CPU override: -f compose.yaml -f compose.cpu.yaml.
# Image tags and the results folder come from .env; see docs/containers.md.
name: fwbench

# Every image here is built from this repository (pull_policy: build), never pulled: a registry image
# that happened to share a name would otherwise be run instead.
x-runner: &runner
{runner_common}\
  deploy:
    resources:
      reservations:
        devices:
          - driver: nvidia
            count: all
            capabilities: [gpu]

services:
"""

RUNNER_SERVICE = """\
  {service}:
{fields}\
    image: "${{FWBENCH_IMAGE_PREFIX:?set FWBENCH_IMAGE_PREFIX in .env}}/{name}-runner:${{{var}_TAG:?set {var}_TAG in .env}}"
    pull_policy: build
    build:
      context: .
      dockerfile: {folder}/Dockerfile
      args:
        BASE_IMAGE: "${{{var}_BASE_IMAGE:?set {var}_BASE_IMAGE in .env}}:${{{var}_TAG}}"
    environment:
      FWBENCH_IMAGE: "${{FWBENCH_IMAGE_PREFIX}}/{name}-runner:${{{var}_TAG}}"
      FWBENCH_REFERENCE_DIR: "{reference_dir}"
      FWBENCH_MODELS_DIR: "{models_dir}"

"""

COMPOSE_TAIL = """\
  # Started only on demand (`docker compose run aggregator ...`), once every runner is healthy.
  aggregator:
    profiles: [aggregator]
    image: "${{FWBENCH_IMAGE_PREFIX}}/aggregator:latest"
    pull_policy: build
    build:
      context: .
      dockerfile: aggregator/Dockerfile
      args:
        BASE_IMAGE: "${{AGGREGATOR_BASE_IMAGE:?set AGGREGATOR_BASE_IMAGE in .env}}"
    user: "${{FWBENCH_UID}}:${{FWBENCH_GID}}"
    depends_on:
{depends_on}
    networks: [runners]
    environment:
      FWBENCH_RUNNERS: "{runners}"
    volumes:
      - "${{FWBENCH_RESULTS_DIR:?set FWBENCH_RESULTS_DIR in .env}}:/results"
    command: ["compare", "--model", "resnet50", "--batch-size", "32", "--out", "/results"]

networks:
  # Internal: the runners are reached from the aggregator's container only, never from outside the host.
  runners:
    internal: true

volumes:
  # The runners' one reference folder; `docker compose down -v` removes it.
  references: {{}}
"""

PORTS_HEAD = """\
# Publish the runners on this host's loopback, to drive them with the fwbench CLI from the host:
#   docker compose -f compose.yaml -f compose.ports.yaml up -d --wait
#   fwbench compare {runner_flags} --model resnet50
# (a runner not compared by default with its profile: --profile {opt_in} up, and its --runner too).
# An internal network publishes nothing, so the runners join a second, ordinary one.
services:
"""

NODES_HEAD = """\
# A second runner of each framework, as a second machine on the compose network, for one job across two
# runners (node ranks in the order the aggregator names them). On one host it is a CPU exercise: two runners
# of one host would share its GPUs, so the second ones reserve none.
#   docker compose -f compose.yaml -f compose.cpu.yaml -f compose.nodes.yaml up -d --wait
#   docker compose -f compose.yaml -f compose.cpu.yaml -f compose.nodes.yaml run --rm aggregator \\
#       compare --devices cpu:0 --model resnet18 --shape 3x64x64
# The rendezvous (torch's c10d store on the first runner's port 29500, TensorFlow's workers on 29500 and
# 29501, torch's gloo on ports of its choosing) stays on the internal network: nothing is published.
services:
"""

CPU_HEAD = """\
# For hosts without NVIDIA GPUs: the runners run on the CPU.
#   docker compose -f compose.yaml -f compose.cpu.yaml up -d --wait
# `!reset` (Compose v2.24 or later) drops the GPU reservation, which a Docker
# engine without the NVIDIA runtime refuses with "could not select device driver".
services:
"""


def read_env(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and not line.startswith("#"))
    return {name.strip(): value.strip() for name, value in pairs}


def dockerfile(framework: Framework, env: dict[str, str]) -> str:
    var = framework.variable
    try:
        base_image_name = env[f"{var}_BASE_IMAGE"]
        base_image = f"{base_image_name}:{env[f'{var}_TAG']}"
    except KeyError as missing:
        raise SystemExit(
            f".env lacks {missing.args[0]}: name {framework.name}'s official image and tag there"
        ) from None
    versions = ", ".join(f"'{module}', {module}.__version__" for module in framework.image_check)
    check = f"import {', '.join(framework.image_check)}; print({versions})"
    text = (ROOT / "runners" / "Dockerfile.in").read_text()
    for token, value in (
        ("@NAME@", framework.name),
        ("@FOLDER@", framework.folder),
        ("@MODULE@", framework.module),
        ("@BASE_IMAGE@", base_image),
        ("@BASE_IMAGE_NAME@", base_image_name),
        ("@IMAGE_CHECK@", check),
        ("@REFERENCE_DIR@", REFERENCE_DIR),
        # The packages of the runners that share its image (the Keras runners'), installed beside its own.
        (
            "@PACKAGES@",
            "".join(f" /opt/fwbench/src/{folder}" for folder in environments([framework])[framework.name][1:]),
        ),
        ("@IMAGE_ENV@", "".join(f"    {key}={value} \\\n" for key, value in framework.image_env)),
    ):
        text = text.replace(token, value)
    return text


def runner_service(framework: Framework, service: str, fields: str) -> str:
    """A runner of this framework's image, as the service named `service`, with `fields` besides its image. A runner
    that shares another framework's environment (a Keras runner) runs that framework's image, its own module as the
    entry point."""
    owner = {f.name: f for f in shipped()}[framework.environment]
    if not framework.owns_environment:
        fields += f'    entrypoint: ["python3", "-m", "{framework.module}"]\n'
    return RUNNER_SERVICE.format(
        service=service,
        fields=fields,
        name=owner.name,
        var=owner.variable,
        folder=owner.folder,
        reference_dir=REFERENCE_DIR,
        models_dir=MODELS_DIR,
    )


def depends_on(names: list[str]) -> str:
    return "\n".join(f"      {name}: {{condition: service_healthy}}" for name in names)


def compose(frameworks: list[Framework]) -> str:
    # A framework not compared by default starts only with its profile (docker compose --profile NAME up), and
    # the aggregator waits for those compared by default only. Its runner list names every runner: a command
    # uses one not compared by default where --frameworks names it (options.runners_in_use).
    services = "".join(
        runner_service(
            f, f.name, "    <<: *runner\n" + ("" if f.compared_by_default else f"    profiles: [{f.name}]\n")
        )
        for f in frameworks
    )
    compared = [f for f in frameworks if f.compared_by_default]
    runners = " ".join(f"{f.name}={f.name}:{RUNNER_PORT}" for f in frameworks)
    common = RUNNER_COMMON.replace("{reference_dir}", REFERENCE_DIR).replace("{models_dir}", MODELS_DIR)
    head = COMPOSE_HEAD.replace("{runner_common}", common)
    return (
        GENERATED
        + head
        + services
        + COMPOSE_TAIL.format(depends_on=depends_on([f.name for f in compared]), runners=runners)
    )


def second_node(framework: Framework) -> str:
    return f"{framework.name}-{SECOND_NODE}"


def compose_nodes(frameworks: list[Framework]) -> str:
    paired = [f for f in frameworks if f.compared_by_default]
    fields = textwrap.indent(
        RUNNER_COMMON.replace("{reference_dir}", REFERENCE_DIR).replace("{models_dir}", MODELS_DIR), "  "
    )
    services = "".join(runner_service(f, second_node(f), fields) for f in paired)
    # One job per framework across both runners: the aggregator's runners become comma-separated pairs (the
    # others keep their one runner).
    runners = " ".join(
        f"{f.name}={f.name}:{RUNNER_PORT}" + (f",{second_node(f)}:{RUNNER_PORT}" if f in paired else "")
        for f in frameworks
    )
    aggregator = (
        f"  aggregator:\n    depends_on:\n{depends_on([second_node(f) for f in paired])}\n"
        f'    environment:\n      FWBENCH_RUNNERS: "{runners}"\n'
    )
    return GENERATED + NODES_HEAD + services + aggregator


def compose_ports(frameworks: list[Framework]) -> str:
    flags = " ".join(f"--runner {f.name}=127.0.0.1:{f.host_port}" for f in frameworks if f.compared_by_default)
    opt_in = next((f.name for f in frameworks if not f.compared_by_default), "NAME")
    services = "".join(
        f"  {f.name}:\n    networks: [runners, published]\n"
        f'    ports: ["127.0.0.1:${{{f.variable}_RUNNER_PORT:-{f.host_port}}}:{RUNNER_PORT}"]\n'
        for f in frameworks
    )
    return (
        GENERATED + PORTS_HEAD.format(runner_flags=flags, opt_in=opt_in) + services + "\nnetworks:\n  published: {}\n"
    )


def compose_cpu(frameworks: list[Framework]) -> str:
    return GENERATED + CPU_HEAD + "".join(f"  {f.name}:\n    deploy: !reset {{}}\n" for f in frameworks)


def generated_files() -> dict[Path, str]:
    frameworks = shipped()
    env = read_env(ROOT / ".env")
    files = {ROOT / f.folder / "Dockerfile": dockerfile(f, env) for f in frameworks if f.owns_environment}
    files[ROOT / "compose.yaml"] = compose(frameworks)
    files[ROOT / "compose.ports.yaml"] = compose_ports(frameworks)
    files[ROOT / "compose.cpu.yaml"] = compose_cpu(frameworks)
    files[ROOT / "compose.nodes.yaml"] = compose_nodes(frameworks)
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is out of date")
    args = parser.parse_args()
    stale = []
    for path, text in generated_files().items():
        if not path.exists() or path.read_text() != text:
            stale.append(path.relative_to(ROOT))
            if not args.check:
                path.write_text(text)
    if args.check and stale:
        print(
            f"out of date: {', '.join(map(str, stale))}; run python3 scripts/generate_runner_files.py", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
