"""Directories another local user prepared for us, as processes: the embedded drivers' root and
the default driver directory pre-created as symbolic links (or as another user's folder) are
refused with an error naming the path and its owner, and nothing they point at is deleted or
chmodded. The other user is ``nobody``: a forked child that switches to it makes the trap (needs
root, as CI runs). The victim is a fresh ``python`` / ``affinity driver`` process in a mount
namespace of its own where ``/dev/shm`` is this test's folder (the per-user names come from the
uid's login name, not from ``$USER``), so its default paths are this test's."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import affinity
import pytest
from affinity.exceptions import DriverError
from conftest import start_standalone_driver, stop_standalone_driver

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="making files as another user (nobody) needs root")

#: Longest a refused start may take (it is refused at once; this only bounds a hang).
REFUSAL_TIMEOUT_S = 30.0
#: pid_max is at most 2^22, so no process has this pid: an entry named for it looks stale.
IMPOSSIBLE_PID = 1 << 22
SHM = Path("/dev/shm")


def as_nobody(action: Callable[[], None]) -> None:
    """Runs ``action`` in a forked child switched to user ``nobody``; fails if it raised."""
    nobody = pwd.getpwnam("nobody")
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            action()
            status = 0
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the nobody child failed to set the trap"


@dataclass(frozen=True)
class Victim:
    """The victim's view: ``shm`` is the folder it sees as ``/dev/shm``."""

    shm: Path

    def real(self, suffix: str = "") -> Path:
        """``affinity-<login name><suffix>`` as this test reaches it."""
        return self.shm / f"affinity-{LOGIN}{suffix}"

    def seen(self, suffix: str = "") -> Path:
        """The same path as the victim sees it (and names it in its errors)."""
        return SHM / f"affinity-{LOGIN}{suffix}"

    def command(self, *args: str) -> list[str]:
        """``args`` run in a private mount namespace with :attr:`shm` bound on ``/dev/shm``."""
        return ["unshare", "-m", "sh", "-c", BIND_SHM, str(self.shm), *args]


#: The login name the per-user paths carry (``shm::directory::user_name``).
LOGIN = pwd.getpwuid(os.getuid()).pw_name
#: Run inside ``unshare -m``: a private copy of the mounts, ``$0`` bound on /dev/shm, then the command.
BIND_SHM = 'mount --make-rprivate / && mount --bind "$0" /dev/shm && exec "$@"'


@pytest.fixture
def victim() -> Iterator[Victim]:
    """A fresh ``/dev/shm`` of the victim's own (1777 like the real one); removed afterwards."""
    shm = SHM / f"advdirs{os.getpid()}"
    shm.mkdir()
    shm.chmod(0o1777)
    yield Victim(shm)
    for entry in shm.iterdir():
        if entry.is_symlink() or entry.is_file():
            entry.unlink()
        else:
            shutil.rmtree(entry)
    shm.rmdir()


@pytest.fixture
def photos(tmp_path: Path) -> Path:
    """The victim's own folder holding ``<number>-*`` entries the old sweep deleted."""
    folder = tmp_path / "photos"
    for name in (f"{IMPOSSIBLE_PID}-holiday", f"{IMPOSSIBLE_PID + 1}-wedding"):
        (folder / name).mkdir(parents=True)
        (folder / name / "photo.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    folder.chmod(0o755)
    return folder


def photos_intact(folder: Path) -> bool:
    return all(
        (folder / name / "photo.jpg").exists()
        for name in (f"{IMPOSSIBLE_PID}-holiday", f"{IMPOSSIBLE_PID + 1}-wedding")
    )


def run_as_victim(victim: Victim, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AFFINITY_DIR"}
    return subprocess.run(
        victim.command(sys.executable, *args),
        capture_output=True,
        text=True,
        timeout=REFUSAL_TIMEOUT_S,
        env=env,
        check=False,
    )


PLAIN_CLIENT = "import affinity\nwith affinity.Client():\n    pass\n"


def test_a_symlinked_embedded_root_is_refused_and_the_target_keeps_its_entries(victim: Victim, photos: Path) -> None:
    root = victim.real("-embedded")
    as_nobody(lambda: os.symlink(photos, root))
    result = run_as_victim(victim, "-c", PLAIN_CLIENT)
    assert result.returncode != 0, "a plain Client() used a symlinked root"
    nobody = pwd.getpwnam("nobody").pw_uid
    assert f"{victim.seen('-embedded')}: is a symbolic link to {photos} owned by uid {nobody}" in result.stderr, (
        result.stderr
    )
    assert "DriverError" in result.stderr
    assert photos_intact(photos), "entries of the link's target were deleted"
    assert root.is_symlink()


def test_an_embedded_root_of_another_user_is_refused_naming_its_owner(victim: Victim) -> None:
    root = victim.real("-embedded")
    stale = root / f"{IMPOSSIBLE_PID}-0"

    def make_root() -> None:
        stale.mkdir(parents=True)
        (stale / "affinity-embedded").write_bytes(b"")
        root.chmod(0o755)

    as_nobody(make_root)
    result = run_as_victim(victim, "-c", PLAIN_CLIENT)
    nobody = pwd.getpwnam("nobody").pw_uid
    assert result.returncode != 0
    assert f"{victim.seen('-embedded')}: is owned by uid {nobody}, not by this user (uid 0)" in result.stderr, (
        result.stderr
    )
    assert stale.exists(), "another user's entry was swept"


def test_unmarked_stale_looking_entries_in_our_own_root_are_kept(victim: Victim) -> None:
    root = victim.real("-embedded")
    root.mkdir(mode=0o700)
    unmarked = root / f"{IMPOSSIBLE_PID}-notes"
    unmarked.mkdir()
    (unmarked / "notes.txt").write_text("mine")
    marked = root / f"{IMPOSSIBLE_PID}-0"
    marked.mkdir()
    (marked / "affinity-embedded").write_bytes(b"")
    result = run_as_victim(victim, "-c", PLAIN_CLIENT)
    assert result.returncode == 0, result.stderr
    assert (unmarked / "notes.txt").exists(), "an entry without our marker was deleted"
    assert not marked.exists(), "our own stale directory was not swept"


def test_a_symlinked_default_driver_directory_is_refused_and_not_chmodded(victim: Victim, photos: Path) -> None:
    default_dir = victim.seen()
    as_nobody(lambda: os.symlink(photos, victim.real()))
    process = subprocess.Popen(
        victim.command(sys.executable, "-m", "affinity.cli", "driver"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "AFFINITY_DIR"},
    )
    try:
        _, stderr = process.communicate(timeout=REFUSAL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail("the driver started on a symlinked default directory")
    assert process.returncode == 1, stderr
    nobody = pwd.getpwnam("nobody").pw_uid
    assert f"driver directory {default_dir}: is a symbolic link to {photos} owned by uid {nobody}" in stderr, stderr
    assert stat.S_IMODE(photos.stat().st_mode) == 0o755, "the link's target was chmodded"
    assert photos_intact(photos) and not (photos / "cnc.dat").exists()


def test_a_client_does_not_trust_a_live_driver_in_another_users_directory_or_behind_a_link(tmp_path: Path) -> None:
    """Another user's driver could feed a client anything: the client attaches only to a
    real directory of its own user. (The live driver here is ours, its directory handed to
    ``nobody`` afterwards, and then reached through a link ``nobody`` made.)"""
    tmp_path.chmod(0o755)
    driver = start_standalone_driver(tmp_path / "driver")
    nobody = pwd.getpwnam("nobody").pw_uid
    try:
        with affinity.Client(dir=str(driver.dir)):
            pass
        link = SHM / f"affinity-adv-link-{os.getpid()}"
        as_nobody(lambda: os.symlink(driver.dir, link))
        try:
            with pytest.raises(DriverError, match=f"{link}: is a symbolic link to {driver.dir} owned by uid {nobody}"):
                affinity.Client(dir=str(link))
        finally:
            link.unlink()
        os.chown(driver.dir, nobody, -1)
        with pytest.raises(DriverError, match=f"{driver.dir}: is owned by uid {nobody}, not by this user"):
            affinity.Client(dir=str(driver.dir))
    finally:
        os.chown(driver.dir, 0, -1)
        stop_standalone_driver(driver)
