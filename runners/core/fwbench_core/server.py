"""The gRPC server every runner shares: a thin servicer, health, reflection, lifecycle."""

from __future__ import annotations

import argparse
import functools
import gc
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from concurrent import futures
from contextlib import suppress
from typing import NoReturn

import grpc
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from . import access as access_mod
from . import plugins, references, wire, wire_events
from .admission import DEFAULT_MAX_QUEUED_REQUESTS
from .backend import Backend
from .choices import Switch
from .decoding import RequestDecodingInterceptor
from .devices import RunnerSettings
from .errors import abort, status_for
from .isolation import RunIsolation
from .process_tree import become_subreaper
from .references import ReferenceFolder
from .service import RunnerService
from .streams import OpenStreamLimit

log = logging.getLogger("fwbench.runner")

ADDRESS_ENV = "FWBENCH_RUNNER_ADDRESS"
# Loopback: another host reaches a runner only when told to listen there (see access.py for who may talk).
DEFAULT_ADDRESS = "127.0.0.1:50051"
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Runner"].full_name
STOP_GRACE_S = 10.0
# How soon a signal's stop is seen: the main thread wakes this often while it serves (twice a second costs nothing).
SIGNAL_POLL_S = 0.5
STDIN_FD = 0
# Server threads beyond the work limit: Describe, ListModels, health checks and reflection always find one.
QUICK_REQUEST_THREADS = 4
# Of those, at most this many may be held by open health watches and reflection streams.
OPEN_STREAMS = 2


class RunnerServicer(pb_grpc.RunnerServicer):
    """Translates messages to plain calls on the RunnerService and back; nothing else."""

    def __init__(self, service: RunnerService) -> None:
        self._service = service

    def Describe(self, request, context):
        return wire.describe_to_wire(
            self._service.info,
            self._service.precisions(),
            self._service.backend.capabilities,
            self._service.catalog.plugins,
        )

    def ListModels(self, request, context):
        return pb.ListModelsResponse(models=[wire.model_to_wire(spec) for spec in self._service.list_models()])

    def InspectModel(self, request, context):
        try:
            config = self._service.model_config(request.model, request.input_shape, request.model_options)
            report = self._service.inspect(config)
        except Exception as exc:
            self._abort(context, exc)
        return wire.model_report_to_wire(config, report)

    def ExportReference(self, request, context):
        return self._reference(request, context, self._service.export_reference)

    def CompareReference(self, request, context):
        return self._reference(request, context, self._service.compare_reference)

    def _reference(self, request, context, action):
        cancelled = threading.Event()
        context.add_callback(cancelled.set)
        try:
            report = action(wire.reference_request_from_wire(request), cancelled.is_set)
        except Exception as exc:
            self._abort(context, exc)
        return wire.reference_report_to_wire(request.name, report)

    def CheckRun(self, request, context):
        try:
            config = self._service.check(wire.run_request_from_wire(request))
        except Exception as exc:
            self._abort(context, exc)
        return wire.config_to_wire(config, self._service.info)

    def OpenBlock(self, request, context):
        cancelled = threading.Event()
        context.add_callback(cancelled.set)
        try:
            ready_s = self._service.open_block(request.process_block, cancelled.is_set)
        except Exception as exc:
            self._abort(context, exc)
        return pb.OpenBlockResponse(ready_s=ready_s)

    def Run(self, request, context):
        cancelled = threading.Event()
        context.add_callback(cancelled.set)
        failure = None
        try:
            run = self._service.run(wire.run_request_from_wire(request), cancelled.is_set)
            for event in run:
                yield wire_events.event_to_wire(event, self._service.info)
        except Exception as exc:
            failure = exc
        if failure is not None:
            self._abort(context, failure)

    @staticmethod
    def _abort(context, exc: Exception):
        if status_for(exc)[0] is grpc.StatusCode.INTERNAL:
            log.error("request failed", exc_info=exc)
        abort(context, exc)


def create_server(
    service: RunnerService, address: str, access: access_mod.Access = access_mod.Access()
) -> tuple[grpc.Server, int, health.HealthServicer]:
    """Build a server for `service` bound to `address` (port 0 picks a free one) with `access` (plaintext and
    no token by default); returns it, the bound port and its health servicer."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=service.work_limit.limit + QUICK_REQUEST_THREADS),
        interceptors=[
            *access.interceptors(),
            OpenStreamLimit(OPEN_STREAMS, exempt=frozenset({f"/{SERVICE_NAME}/Run"})),
            RequestDecodingInterceptor(),
        ],
        options=access_mod.SERVER_OPTIONS,
    )
    pb_grpc.add_RunnerServicer_to_server(RunnerServicer(service), server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME), server
    )
    port = access.bind(server, address)
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server, port, health_servicer


def serve(
    make_backend: Callable[[RunnerSettings], Backend],
    argv: list[str] | None = None,
    default_isolation: RunIsolation = RunIsolation.THREAD,
) -> NoReturn:
    """Command-line entry point shared by every runner. `make_backend` must pickle (a backend class does):
    a worker process builds its own backend with it. Ends the process once the runner has stopped, or was
    refused at start (an option or address that cannot work)."""
    try:
        _serve(make_backend, argv, default_isolation)
    except SystemExit as refused:
        _exit(refused.code)
    _exit(0)


def _exit(code: object) -> NoReturn:
    """Exit as sys.exit(code) would, but without the interpreter's teardown: there a framework's extension
    modules free their objects one by one (seconds), and triton's, loaded with torch, print some 30 lines of
    nanobind "leaked" warnings that bury a refused start's one-line reason. Nothing is lost: in-flight requests
    had the stop's grace period, and worker processes end with their runner (isolation.py)."""
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
    logging.shutdown()  # flushes every handler
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if code is None else code if isinstance(code, int) else 1)


def _serve(
    make_backend: Callable[[RunnerSettings], Backend], argv: list[str] | None, default_isolation: RunIsolation
) -> None:
    parser = _parser(default_isolation)
    args = parser.parse_args(argv)
    access = _checked(parser, args)
    # What a worker's code leaves when the worker dies comes back here, to be ended before the next run, not to PID 1.
    become_subreaper()
    stop = _stop_on_signals()
    reference_folder = references.folder_from_arguments(parser, args)
    try:
        logging.basicConfig(
            level=args.log_level, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s"
        )
        service = _service(make_backend, args, reference_folder)
        _listen_until_stopped(service, args, access, stop)
    finally:
        reference_folder.close()


class _Stop(threading.Event):
    """Set by SIGTERM or SIGINT. Until the runner listens, a signal also ends the start where it is (an import, a
    plug-in's check), as SystemExit(128 + signal), so that the finally blocks remove what the start made; once it
    listens, the signal only asks the server to stop, which finishes the requests in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.listening = False
        self.signalled = False

    def on_signal(self, signum: int, _frame: object) -> None:
        # No lock taken here: the handler runs in the main thread, which may hold this event's own lock inside wait()
        # when the signal comes; set() would then wait for itself forever (a runner stopped the moment it said it
        # listened hung so, in CI). wait_for_stop polls the flag instead.
        self.signalled = True
        if not self.listening:
            raise SystemExit(128 + signum)

    def is_set(self) -> bool:
        return self.signalled or super().is_set()

    def wait_for_stop(self) -> None:
        while not self.is_set():
            super().wait(SIGNAL_POLL_S)


def _stop_on_signals() -> _Stop:
    # Set before a private folder exists: a signal's default action would end the process without removing it, and
    # a parent may stop us while the framework imports, or the moment we say we listen.
    stop = _Stop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop.on_signal)
    return stop


def _parser(default_isolation: RunIsolation) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="fwbench runner: serves the fwbench.runner.v1.Runner gRPC service")
    parser.add_argument(
        "--address",
        default=os.environ.get(ADDRESS_ENV, DEFAULT_ADDRESS),
        help=f"host:port to listen on; port 0 picks a free port; 0.0.0.0:PORT listens on every interface, for "
        f"other hosts (default: ${ADDRESS_ENV} or {DEFAULT_ADDRESS}, this host only)",
    )
    cores = os.cpu_count() or 1
    parser.add_argument(
        "--intra-op-threads", type=int, default=cores, help=f"threads within one op (default: all cores, {cores})"
    )
    parser.add_argument(
        "--inter-op-threads", type=int, default=cores, help=f"ops run at once (default: all cores, {cores})"
    )
    parser.add_argument(
        "--cudnn-autotune",
        choices=[s.value for s in Switch],
        default=Switch.OFF.value,
        help="cuDNN autotuning for every run (TensorFlow reads it once per process); default off",
    )
    parser.add_argument(
        "--run-isolation",
        choices=[i.value for i in RunIsolation],
        default=default_isolation.value,
        help="where a run executes: 'thread' in this process; 'process' in a fresh worker process per run, whose "
        "exit gives all its device memory back; 'process-on-gpu' a fresh process for GPU runs only; "
        "'process-per-2-runs' a worker process for every 2 CPU runs (GPU runs: a fresh one each) "
        f"(default for this runner: {default_isolation.value})",
    )
    parser.add_argument(
        "--max-queued-requests",
        type=int,
        default=DEFAULT_MAX_QUEUED_REQUESTS,
        help="runs, inspections and reference exports and comparisons held at once, running or waiting for their "
        f"device; one more is refused as busy (RESOURCE_EXHAUSTED) (default {DEFAULT_MAX_QUEUED_REQUESTS})",
    )
    parser.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="stop gracefully once standard input closes: a parent that holds the only write end of a pipe on "
        "it (the aggregator) takes the runner with it however it ends, kill -9 included",
    )
    parser.add_argument(
        plugins.MODELS_DIR_FLAG,
        dest="models_dir",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder of model plug-ins (one folder per model with model.toml and build_<framework>.py), or one "
        f"plug-in; repeatable. ${plugins.MODELS_DIR_ENV} (folders joined by '{os.pathsep}') and installed packages' "
        f"'{plugins.ENTRY_POINT_GROUP}' entry points add more",
    )
    parser.add_argument(
        "--plugin-limit-s",
        type=float,
        default=plugins.PLUGIN_LIMIT_S,
        metavar="SECONDS",
        help="how long a plug-in's code may take in each phase the runner waits on (import at start-up, build(), "
        "inspection, parity) before the process running it is stopped and the request fails, naming the plug-in "
        f"(default {plugins.PLUGIN_LIMIT_S:g}; at most {plugins.MAX_PLUGIN_LIMIT_S:g})",
    )
    references.add_arguments(parser)
    access_mod.add_arguments(parser)
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return parser


def _checked(parser: argparse.ArgumentParser, args: argparse.Namespace) -> access_mod.Access:
    """The bounds argparse does not check (exiting with a usage error, as argparse does), and who may connect."""
    for flag in ("intra_op_threads", "inter_op_threads", "max_queued_requests"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    if not 0 < args.plugin_limit_s <= plugins.MAX_PLUGIN_LIMIT_S:  # NaN fails this too
        parser.error(f"--plugin-limit-s must be more than 0 and at most {plugins.MAX_PLUGIN_LIMIT_S:g} seconds")
    try:
        return access_mod.from_args(args)
    except access_mod.AccessError as error:
        parser.error(str(error))


def _service(
    make_backend: Callable[[RunnerSettings], Backend], args: argparse.Namespace, reference_folder: ReferenceFolder
) -> RunnerService:
    settings = RunnerSettings(args.intra_op_threads, args.inter_op_threads, Switch(args.cudnn_autotune))
    backend_factory = functools.partial(make_backend, settings)
    service = RunnerService(
        backend_factory(),
        isolation=RunIsolation(args.run_isolation),
        make_backend=backend_factory,
        references=reference_folder,
        max_queued_requests=args.max_queued_requests,
        plugins=plugins.locations(args.models_dir),
        plugin_limit_s=args.plugin_limit_s,
    )
    for report in service.catalog.plugins:
        if report.error:
            log.warning("model plug-in %s (%s) not served: %s", report.folder, report.origin, report.error)
        else:
            log.info("model plug-in %s (%s): %s", report.folder, report.origin, ", ".join(report.models) or "no model")
    return service


def _listen_until_stopped(
    service: RunnerService, args: argparse.Namespace, access: access_mod.Access, stop: _Stop
) -> None:
    """Serve until `stop` is set (SIGTERM, SIGINT) or, with --exit-with-parent, standard input ends, then finish the
    requests in flight within the grace period."""
    # What exists now (the framework's modules and the backend) lives as long as the process: kept out of the
    # collections after every run, which otherwise scanned it each time (0.15 s in a torch or TensorFlow runner).
    gc.freeze()
    server, port, health_servicer = create_server(service, args.address, access=access)
    server.start()
    stop.listening = True
    host = args.address.rsplit(":", 1)[0]
    # One line on stdout tells a parent process (the aggregator) where we listen.
    framework = service.backend.framework
    print(json.dumps({"event": "listening", "framework": framework, "address": f"{host}:{port}"}), flush=True)
    log.info(
        "%s runner listening on %s:%d (%s), run isolation %s",
        framework,
        host,
        port,
        access.describe(),
        args.run_isolation,
    )

    if args.exit_with_parent:
        threading.Thread(target=_set_at_stdin_end, args=(stop,), name="fwbench-parent-watch", daemon=True).start()
    stop.wait_for_stop()
    log.info("stopping: finishing in-flight requests for up to %.0f s", STOP_GRACE_S)
    health_servicer.enter_graceful_shutdown()
    server.stop(grace=STOP_GRACE_S).wait()


def _set_at_stdin_end(stop: threading.Event) -> None:
    with suppress(OSError):  # no standard input at all ends it too
        while os.read(STDIN_FD, 4096):
            pass
    log.info("standard input closed: the parent process has ended")
    stop.set()
