"""The defaults of the media driver and of consumer groups, as the Rust core defines them (one
definition each; these constants are read from the compiled module, never repeated here).

``DRIVER_SETTINGS`` names every driver setting: the keywords of ``affinity.Client(...)`` and
the options of ``affinity driver`` (with dashes). A duration setting also takes the name with
``_ms`` appended, whose bare number is milliseconds (``command_timeout_ms=2000``).
"""

from __future__ import annotations

from typing import Final

from affinity import _affinity

#: Every setting of the driver, in the order ``affinity driver --help`` lists them.
DRIVER_SETTINGS: Final[tuple[str, ...]] = tuple(_affinity.DRIVER_SETTINGS)
#: Term length of ``aeron:ipc`` logs whose channel names none (bytes).
TERM_LENGTH_IPC: Final[int] = _affinity.DEFAULT_TERM_LENGTH_IPC
#: Term length of ``aeron:udp`` logs whose channel names none (bytes).
TERM_LENGTH_UDP: Final[int] = _affinity.DEFAULT_TERM_LENGTH_UDP
#: MTU of logs whose channel names none (bytes).
MTU: Final[int] = _affinity.DEFAULT_MTU
#: Receiver window of images whose channel names none (bytes).
RECEIVER_WINDOW: Final[int] = _affinity.DEFAULT_RECEIVER_WINDOW
#: ``SO_RCVBUF`` of the driver's UDP sockets (bytes; the OS caps it at ``net.core.rmem_max``).
SOCKET_RECEIVE_BUFFER: Final[int] = _affinity.DEFAULT_SOCKET_RECEIVE_BUFFER
#: A publication forgets a silent receiver after this long (ms).
RECEIVER_TIMEOUT_MS: Final[int] = _affinity.DEFAULT_RECEIVER_TIMEOUT_MS
#: The driver reclaims a client silent this long (ms).
CLIENT_TIMEOUT_MS: Final[int] = _affinity.DEFAULT_CLIENT_TIMEOUT_MS
#: A client waits this long for the driver's answer to a command, embedded or attached (ms).
COMMAND_TIMEOUT_MS: Final[int] = _affinity.DEFAULT_COMMAND_TIMEOUT_MS
#: A client attached to a standalone driver trusts its silence this long (ms).
DRIVER_TIMEOUT_MS: Final[int] = _affinity.DEFAULT_DRIVER_TIMEOUT_MS
#: A released publication waits at most this long for its subscribers (ms).
LINGER_MS: Final[int] = _affinity.DEFAULT_LINGER_MS
#: Group members send heartbeats this often (ms).
GROUP_HEARTBEAT_INTERVAL_MS: Final[int] = _affinity.DEFAULT_GROUP_HEARTBEAT_INTERVAL_MS
#: A group member not heard for this long is gone (ms).
GROUP_LIVENESS_TIMEOUT_MS: Final[int] = _affinity.DEFAULT_GROUP_LIVENESS_TIMEOUT_MS
#: A group publisher resends what is not acknowledged after this long (ms).
GROUP_RESEND_TIMEOUT_MS: Final[int] = _affinity.DEFAULT_GROUP_RESEND_TIMEOUT_MS
#: A group consumer's primary/backup cycle (ms).
GROUP_CYCLE_MS: Final[int] = _affinity.DEFAULT_GROUP_CYCLE_MS
#: A group member given a bootstrap list waits this long for the first answer (ms).
GROUP_BOOTSTRAP_TIMEOUT_MS: Final[int] = _affinity.DEFAULT_GROUP_BOOTSTRAP_TIMEOUT_MS

__all__ = [
    "CLIENT_TIMEOUT_MS",
    "COMMAND_TIMEOUT_MS",
    "DRIVER_SETTINGS",
    "DRIVER_TIMEOUT_MS",
    "GROUP_BOOTSTRAP_TIMEOUT_MS",
    "GROUP_CYCLE_MS",
    "GROUP_HEARTBEAT_INTERVAL_MS",
    "GROUP_LIVENESS_TIMEOUT_MS",
    "GROUP_RESEND_TIMEOUT_MS",
    "LINGER_MS",
    "MTU",
    "RECEIVER_TIMEOUT_MS",
    "RECEIVER_WINDOW",
    "SOCKET_RECEIVE_BUFFER",
    "TERM_LENGTH_IPC",
    "TERM_LENGTH_UDP",
]
