"""Two "hosts" for the consumer-group test: run inside a private network namespace (``unshare -n``).

Makes a bridge ``br0`` (10.9.0.1/24) in the namespace it runs in and two host namespaces linked
to it by veth pairs: host 10.9.0.2 runs the publisher, host 10.9.0.3 the validator and two
consumers (which republish on host 3's own loopback). Members advertise their veth address
(``--host``). Prints ``MEMBERS <json>`` (the member files while the consumers run) and
``PUBLISHER <json>`` (the publisher's summary); the validator's report goes to
``WORKDIR/validator.json``, the consumers' output to ``WORKDIR/consumer<i>.log``.

With ``bootstrap`` the hosts share no registry: host 3 holds the definition in the registry
AFFINITY_REGISTRY names, its consumers listen at fixed addresses (``--listen``), and the publisher
on host 2 has an empty registry of its own and finds the group only through ``--bootstrap``.

With ``driver`` only a standalone ``affinity driver`` on host 3 reads that registry: it answers
BOOTSTRAP at :data:`DRIVER_BOOTSTRAP` (``--bootstrap-listen``, its log in ``WORKDIR/driver.log``),
and the consumers (OS-chosen inboxes) and the publisher on host 2 have empty registries of their
own and name only that driver in ``--bootstrap``.

    usage: groups_two_hosts.py WORKDIR [bootstrap|driver]   (AFFINITY_REGISTRY names the registry)
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

GROUP = "twohosts"
KEYS = 100
COUNT = 4000
CHANNEL = "aeron:udp?endpoint=127.0.0.1:40777"
AFFINITY = [sys.executable, "-m", "affinity.cli", "group"]
TIMINGS = ["--liveness", "1s", "--heartbeat", "100ms"]
#: The consumers' fixed inboxes in bootstrap mode (host 3).
CONSUMER_INBOXES = ["10.9.0.3:41001", "10.9.0.3:41002"]
#: Where host 3's driver answers BOOTSTRAP in driver mode.
DRIVER_BOOTSTRAP = "10.9.0.3:41000"


def sh(command: str) -> None:
    subprocess.run(["bash", "-c", command], check=True)


def host_mac(number: int) -> str:
    """The MAC address of host NUMBER's ``eth0``: fixed, so a host started again (a restarted
    node) is reached at once by peers whose neighbour cache still holds it."""
    return f"02:00:0a:09:00:{number:02x}"


def spawn_host(number: int, command: list[str]) -> subprocess.Popen[str]:
    """Runs ``command`` in a new network namespace whose ``eth0`` is 10.9.0.NUMBER on the bridge
    (a host started again waits until the veth pair of its previous namespace is gone)."""
    setup = (
        "echo ready; while ! ip link show eth0 >/dev/null 2>&1; do sleep 0.02; done; ip link set lo up && "
        f'ip addr add 10.9.0.{number}/24 dev eth0 && ip link set eth0 up && exec "$@"'
    )
    child = subprocess.Popen(
        ["unshare", "-n", "bash", "-c", setup, "host", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    sh(f"for _ in $(seq 100); do ip link show vh{number} >/dev/null 2>&1 || break; sleep 0.05; done")
    # Only once the child is in its own namespace may its end of the veth pair move there.
    sh(
        f"ip link add vh{number} type veth peer name eth0 address {host_mac(number)} netns {child.pid} && "
        f"ip link set vh{number} master br0 && ip link set vh{number} up"
    )
    return child


def member_files(registry: Path) -> list[dict[str, object]]:
    folder = registry / "members" / GROUP
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # being rewritten
    return found


def _last_ownership(log: Path) -> str:
    try:
        lines = [line for line in log.read_text().splitlines() if " owns queues " in line]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def main() -> int:
    workdir = Path(sys.argv[1])
    bootstrap = sys.argv[2:] == ["bootstrap"]
    driver = sys.argv[2:] == ["driver"]
    registry = Path(os.environ["AFFINITY_REGISTRY"])
    seeds = DRIVER_BOOTSTRAP if driver else ",".join(CONSUMER_INBOXES)
    secret = registry / "groups" / f"{GROUP}.secret"
    # The group secret travels out of band, as it would between hosts.
    secret_args = ["--secret-file", str(secret)] if secret.exists() else []
    sh("ip link set lo up && ip link add br0 type bridge && ip addr add 10.9.0.1/24 dev br0 && ip link set br0 up")
    validate = [*AFFINITY, "validate", GROUP, "--channel", CHANNEL, "--idle-exit", "3", "--duration", "90"]
    validate += ["--expect-keys", str(KEYS), "--json", "--quiet"]
    script = []
    if driver:
        empty = workdir / "consumer-registry"
        empty.mkdir(mode=0o700)
        start = [sys.executable, "-m", "affinity.cli", "driver", "--dir", str(workdir / "driver")]
        start += ["--bootstrap-listen", DRIVER_BOOTSTRAP, "--registry", str(registry)]
        log = shlex.quote(str(workdir / "driver.log"))
        script.append(f"{shlex.join(start)} > {log} 2>&1 & d=$!")
        script.append(f"for i in $(seq 600); do grep -q 'answering BOOTSTRAP' {log} && break; sleep 0.1; done")
    script.append(f"{shlex.join(validate)} > {shlex.quote(str(workdir / 'validator.json'))} & v=$!")
    for index in range(2):
        consume = [*AFFINITY, "consume", GROUP, "--index", str(index), "--count", "2", "--republish", CHANNEL]
        consume += ["--host", "10.9.0.3", "--cycle", "2", *TIMINGS]
        if bootstrap:
            consume += ["--listen", CONSUMER_INBOXES[index], "--bootstrap", seeds]
        if driver:
            consume += ["--registry", str(workdir / "consumer-registry"), "--bootstrap", seeds, *secret_args]
        log = shlex.quote(str(workdir / f"consumer{index}.log"))
        script.append(f"{shlex.join(consume)} > {log} 2>&1 & c{index}=$!")
    stop_driver = "; kill -TERM $d; wait $d" if driver else ""
    script.append(f'wait $v; rc=$?; kill -TERM $c0 $c1; wait $c0 $c1{stop_driver}; exit "$rc"')
    consumers = spawn_host(3, ["bash", "-c", "; ".join(script)])
    # Wait for the steady state: each consumer owns its primaries (queue % 2 == index).
    primaries = {index: f"consumer {index} owns queues [{index}, {index + 2}]" for index in range(2)}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(
        owned in _last_ownership(workdir / f"consumer{index}.log") for index, owned in primaries.items()
    ):
        time.sleep(0.1)
    print("MEMBERS", json.dumps(member_files(registry)), flush=True)
    publish = [*AFFINITY, "publish", GROUP, "--keys", str(KEYS), "--rate", "1000", "--count", str(COUNT)]
    publish += ["--host", "10.9.0.2", "--json", *TIMINGS]
    if bootstrap or driver:
        # A registry of its own, without the group: the definition comes from host 3.
        own = workdir / "publisher-registry"
        own.mkdir(mode=0o700)
        publish = ["env", f"AFFINITY_REGISTRY={own}", *publish, "--bootstrap", seeds, *secret_args]
    publisher = spawn_host(2, publish)
    out, _ = publisher.communicate(timeout=120)
    lines = out.strip().splitlines()
    print("PUBLISHER", lines[-1] if lines else "{}", flush=True)
    consumers_out, _ = consumers.communicate(timeout=120)
    print("CONSUMERS", consumers.returncode, consumers_out, flush=True)
    return 0 if publisher.returncode == 0 and consumers.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
