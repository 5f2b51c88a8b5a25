"""Checking plug-ins' builder modules where their code cannot harm the runner: imported in a process of their own,
each within a time limit. The runner itself never runs a plug-in's code: one that loops or waits at import, or ends
its process, costs that process and is named, and the runner serves the others."""

from __future__ import annotations

import logging
import multiprocessing
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

from .models import ModelSpec
from .plugin_modules import PluginError, builder_file, import_builder
from .process_tree import end_own_tree, end_strays, kill_tree
from .worker_output import CappedCopy, redirect_output
from .worker_start import start_worker

log = logging.getLogger("fwbench.runner")

# How long the checking process may take to import the framework (make_builder's module), before any plug-in's
# code runs: a loaded host's import, never a plug-in's.
FRAMEWORK_IMPORT_LIMIT_S = 600.0
# How long a process that closed its pipe gets to exit before it is killed.
EXIT_GRACE_S = 5.0


def check_builders(
    framework: str,
    plugins: Sequence[tuple[Path, ModelSpec]],
    make_builder: Callable[[ModuleType, Path], object],
    limit_s: float,
    check_decoder: Callable[[object, ModelSpec], None] | None = None,
) -> list[str]:
    """For each (folder, spec) plug-in, "" where its builder module imports, `make_builder` accepts it and, where
    the spec declares it generates, `check_decoder` accepts the builder (both must pickle), else why not. One
    process imports the framework once and checks them in turn, each within `limit_s`; one that outlives it or
    ends the process is named, and a fresh process checks the rest."""

    results: list[str] = []
    while len(results) < len(plugins):
        pending = list(plugins[len(results) :])
        results += _check_in_one_process(
            framework,
            pending,
            (make_builder, check_decoder),
            limit_s,
            [folder / builder_file(framework) for folder, _ in pending],
        )
    return results


def _check_in_one_process(framework, pending, checks, limit_s: float, paths: list[Path]) -> list[str]:
    """The checks of `pending` one process made, up to the first that failed it (the rest are checked anew)."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    output_reader, output_writer = context.Pipe(duplex=False)
    process = context.Process(
        target=_check_main,
        args=(
            [(str(f), spec) for f, spec in pending],
            framework,
            checks,
            sender,
            output_writer,
            logging.getLogger().getEffectiveLevel(),
        ),
        name="fwbench-plugin-check",
        daemon=True,
    )
    process.start()
    sender.close()  # the child holds the only writer: its end ends our waits
    output_writer.close()
    output = CappedCopy(output_reader, f"the process checking plug-ins (pid {process.pid})")
    results: list[str] = []
    try:
        if not receiver.poll(FRAMEWORK_IMPORT_LIMIT_S):
            return [
                f"the process that checks plug-ins did not import {framework} within {FRAMEWORK_IMPORT_LIMIT_S:g} s"
            ] * len(pending)
        try:
            receiver.recv()  # ready: the framework is imported
        except EOFError:
            process.join(EXIT_GRACE_S)
            return [
                f"the process that checks plug-ins ended (exit code {process.exitcode}) before it could check {path}"
                for path in paths
            ]
        for path in paths:
            log.info("checking model plug-in %s in a process of its own (at most %g s)", path, limit_s)
            try:
                receiver.recv()  # the child starts this plug-in: the limit starts now
                if not receiver.poll(limit_s):
                    return [
                        *results,
                        f"{path} did not finish importing within {limit_s:g} s (a loop or a wait at "
                        "import?); the runner stopped it and serves the other models",
                    ]
                results.append(receiver.recv())
            except EOFError:
                process.join(EXIT_GRACE_S)
                return [*results, f"{path} ended its process (exit code {process.exitcode}) while importing"]
        return results
    finally:
        if process.is_alive():
            process.join(EXIT_GRACE_S if len(results) == len(pending) else 0)
        if process.is_alive():
            kill_tree(process)
        process.join()
        receiver.close()
        end_strays()  # first: a stray may hold the output's pipe open
        output.finish()


def _check_main(pending: list[tuple[str, ModelSpec]], framework: str, checks, sender, output, log_level: int) -> None:
    """The checking process: its output capped (worker_output) and in a session of its own, so that what a plug-in
    starts at import ends with it (process_tree)."""
    redirect_output(output)
    start_worker(log_level)
    try:
        _check_each(pending, framework, checks, sender)
    finally:
        end_own_tree()


def _check_each(pending: list[tuple[str, ModelSpec]], framework: str, checks, sender) -> None:
    make_builder, check_decoder = checks
    sender.send("ready")  # make_builder arrived: its framework is imported
    for folder, spec in pending:
        sender.send("start")
        try:
            builder = make_builder(import_builder(Path(folder), framework, spec.name), Path(folder))
            if spec.generates and check_decoder is not None:
                check_decoder(builder, spec)
        except PluginError as error:
            sender.send(str(error))
        else:
            sender.send("")
