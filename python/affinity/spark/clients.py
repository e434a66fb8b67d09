"""Which media driver a Spark Python worker uses, and the errors that say how to get one running.

``driverDir`` (the option) attaches to the standalone ``affinity driver`` running in that
directory on the worker's host; without it, a non-empty ``$AFFINITY_DIR`` in the worker's
environment (inherited from the Spark worker or executor that launched it) does the same; with
neither, the worker starts an embedded driver of its own. One Spark option cannot name a folder
per host, so every host of a cluster runs its driver in the same directory (or sets
``AFFINITY_DIR`` in the environment its Spark worker starts with).

Spark reuses its Python workers across tasks and micro-batches: :func:`shared_client` keeps one
client per worker process and driver, closed when the process exits.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Final

import affinity
from affinity.driver import DRIVER_DIR_ENV
from affinity.exceptions import AffinityError, ConfigError
from affinity.spark.errors import SparkOptionError

__all__ = ["DRIVER_DIR_ENV", "SPARK_LOCAL_IP_ENV", "advertised_host", "check_driver", "open_client", "shared_client"]

#: The address Spark binds on this host (set per worker host); a group member advertises it when
#: the ``host`` option is not given, since one option cannot name every executor's address.
SPARK_LOCAL_IP_ENV: Final = "SPARK_LOCAL_IP"

_LOCK = threading.Lock()
#: This process's clients by driver directory (None: ``$AFFINITY_DIR`` or embedded).
_SHARED: dict[str | None, affinity.Client] = {}


def _environment_dir() -> str | None:
    value = os.environ.get(DRIVER_DIR_ENV, "")
    return value or None


def open_client(driver_dir: str | None) -> affinity.Client:
    """A new client of the driver in ``driver_dir`` (else ``$AFFINITY_DIR``, else embedded); an
    attach that fails raises :class:`SparkOptionError` naming the directory, the cause and the fix."""
    try:
        if driver_dir is not None:
            return affinity.Client(dir=driver_dir)
        return affinity.Client()
    except (AffinityError, OSError) as error:
        if isinstance(error, ConfigError):
            raise
        raise SparkOptionError(_attach_failure(driver_dir, error)) from None


def _attach_failure(driver_dir: str | None, error: BaseException) -> str:
    if driver_dir is not None:
        where, directory, fallback = f"option driverDir={driver_dir!r}", driver_dir, "remove driverDir"
    else:
        directory = _environment_dir() or "?"
        where = f"${DRIVER_DIR_ENV}={directory!r} in this Spark worker's environment"
        fallback = f"unset {DRIVER_DIR_ENV}"
    return (
        f"{where}: {error}. Start the driver on every host of the cluster as the user Spark runs as "
        f"(affinity driver --dir {directory}), or {fallback} to give each Spark worker process an embedded driver"
    )


def check_driver(driver_dir: str | None) -> None:
    """At planning time, on the Spark driver: attach once to the standalone driver the tasks will
    use (``driver_dir``, else ``$AFFINITY_DIR``), so that a missing driver or another user's
    directory fails ``save()``/``start()`` instead of every task. Nothing to check when the
    workers use embedded drivers."""
    if driver_dir is None and _environment_dir() is None:
        return
    open_client(driver_dir).close()


def shared_client(driver_dir: str | None) -> affinity.Client:
    """This process's client of ``driver_dir``'s driver (see :func:`open_client`), created once and
    reused by every task and batch the worker runs; closed when the process exits."""
    with _LOCK:
        client = _SHARED.get(driver_dir)
        if client is None:
            client = open_client(driver_dir)
            if not _SHARED:
                atexit.register(close_shared)
            _SHARED[driver_dir] = client
        return client


def close_shared() -> None:
    """Closes the clients :func:`shared_client` made (the sink's transports first: see
    :func:`affinity.spark.sink.close_transports`)."""
    with _LOCK:
        clients = list(_SHARED.values())
        _SHARED.clear()
    for client in clients:
        client.close()


def advertised_host(host: str | None) -> str | None:
    """The address a group member advertises: the ``host`` option, else ``$SPARK_LOCAL_IP``, else
    None (the group's default)."""
    if host is not None:
        return host
    return os.environ.get(SPARK_LOCAL_IP_ENV) or None
