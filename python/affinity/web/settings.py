"""Every default, limit and name of ``affinity web``, defined once.

The limits keep one page update and one scrape bounded whatever the size of what is watched
(1,000 streams, 4,096 queues): tables are paginated, histories and event lists have a fixed
length, hostile inputs (router reports) have a byte cap.
"""

from __future__ import annotations

#: Where the server listens by default: loopback only (``--listen`` to change).
DEFAULT_LISTEN = "127.0.0.1:8080"
#: Seconds between two looks at the drivers, groups and routers (and between two page updates).
SAMPLE_INTERVAL = 0.5
#: Seconds of rate history kept per chart (the page shows "the last minutes").
HISTORY_SECONDS = 180
#: Seconds between two points of a rate chart.
HISTORY_STEP = 1.0
#: Points of a rate chart, kept and sent.
HISTORY_POINTS = int(HISTORY_SECONDS / HISTORY_STEP)
#: Queue rows of one group sent per page update (the table is paginated beyond that).
QUEUE_PAGE_SIZE = 256
#: Per-stream counter rows of one driver sent per page update (paginated beyond that).
STREAM_PAGE_SIZE = 100
#: Group moves kept per group (the newest first on the page).
MAX_MOVES_KEPT = 200
#: Group moves sent per page update.
MOVES_SHOWN = 50
#: Distinct driver errors sent per page update (the total is always given).
ERRORS_SHOWN = 50
#: Clients of a driver sent per page update (the total is always given).
CLIENTS_SHOWN = 100
#: Groups of the registry watched at most (each one is an observer of the control plane).
MAX_GROUPS = 64
#: Problems (junk registry files, ...) sent per page update.
PROBLEMS_SHOWN = 50
#: Longest query string of the page's event stream accepted (pagination choices), in characters.
MAX_VIEW_QUERY = 4096
#: Page size bounds accepted from the page (a request outside is clamped).
MAX_PAGE_INDEX = 1 << 20
#: Seconds between two attempts to watch a group whose observer could not start.
GROUP_RETRY_SECONDS = 10.0
#: Connections the server handles at once (page streams included); more are refused (503).
MAX_CONNECTIONS = 64
