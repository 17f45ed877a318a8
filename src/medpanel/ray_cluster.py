"""Connecting to a Ray cluster, shared by `bench --executor ray` (runs/ray_executor.py) and `curate --executor
ray` (curate/ray_stages.py): the import with its install hint, the address check, a local instance, the
signal handlers Ray would take, and what a lost worker looks like. Ray is imported only when called.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from typing import Any

from medpanel.errors import MissingExtraError, UsageError

MAX_ATTEMPTS = 3  # tries of one item whose worker died, before it is recorded as failed
LOCAL_OBJECT_STORE_BYTES = 200 * 1024**2  # a local instance's object store: items are small JSON
PROBE_TIMEOUT_S = 5.0  # a cluster address that does not answer a TCP connection in this long is refused


def import_ray():
    try:
        import ray
    except ImportError:
        raise MissingExtraError("--executor ray", "ray", "ray") from None
    return ray


def probe(address: str, client_refusal: tuple[str, str]) -> None:
    """Refuse at once an address nothing listens on (ray.init would retry it for minutes)."""
    if address.startswith("ray://"):
        raise UsageError(f"--address {address}: {client_refusal[0]}", client_refusal[1])
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise UsageError(f"--address {address!r} is not HOST:PORT (or auto: the cluster `ray start` began on this machine).",
                         "Give the head node's address as `ray start --head` printed it, e.g. --address 10.0.0.5:6379.")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        raise UsageError(f"No Ray cluster answers at {address}: {exc}.",
                         "Start one there (`ray start --head`), check the address and port, or drop --address for a local one.") from None


def connect(address: str | None, client_refusal: tuple[str, str], num_cpus: int | None = None) -> bool:
    """Connect to the cluster at `address`, or start a small local instance; True when this process started
    (and so should stop) the connection. A process already connected (a test, a notebook) is used as it is."""
    ray = import_ray()
    address = None if address == "local" else address
    if address and address != "auto":
        probe(address, client_refusal)
    if ray.is_initialized():
        return False
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "WARNING", "configure_logging": False}
    if address:
        options["address"] = address
    else:  # "local": a new instance, whatever RAY_ADDRESS or a cluster already on this machine says
        options |= {"address": "local", "num_cpus": num_cpus or os.cpu_count() or 1, "object_store_memory": LOCAL_OBJECT_STORE_BYTES}
    # ray.init makes SIGTERM exit the process at once; medpanel's handler stops a run as Ctrl-C does (logged, resumable).
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        ray.init(**options)
    except (ConnectionError, ValueError, RuntimeError, TimeoutError) as exc:
        raise UsageError(f"Could not connect to the Ray cluster at {address or 'a new local instance'}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}.",
                         "Check --address (MEDPANEL_RAY_ADDRESS) against `ray status` on the head node; a cluster with token "
                         "authentication also needs RAY_AUTH_MODE=token and its token here (RAY_AUTH_TOKEN or ~/.ray/auth_token).") from None
    finally:
        if threading.current_thread() is threading.main_thread():
            for sig, handler in handlers.items():
                if handler is not None:
                    signal.signal(sig, handler)
    return True


def lost_worker_errors(ray) -> tuple[type[BaseException], ...]:
    """The Ray errors that mean the attempt's worker (or its node, or its result) is gone, not that the
    task failed: the driver submits such an attempt again."""
    e = ray.exceptions
    return (e.WorkerCrashedError, e.NodeDiedError, e.LocalRayletDiedError, e.OutOfMemoryError, e.ObjectLostError,
            e.OwnerDiedError, e.ObjectFetchTimedOutError, e.ObjectReconstructionFailedError)


def require_cpu(ray) -> None:
    """Every task needs one CPU: on a cluster with none, every task would wait forever."""
    if ray.cluster_resources().get("CPU", 0) < 1:
        raise UsageError("The Ray cluster has no CPU for a worker (its nodes were started with --num-cpus=0, or none joined).",
                         "Add a node with `ray start --address HEAD:PORT`, or start the head with CPUs.")


def disconnect(ray, owned: bool) -> bool:
    """End the connection when this process started it (see connect); always False: nothing owned after."""
    if owned and ray.is_initialized():
        ray.shutdown()
    return False


def first_line(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None) or exc
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[-1] if text else ''}"
