"""Shared fixtures.  Tests use the real parts: the probe is compiled and run
with SCHED_FIFO, cyclictest and stress-ng are Debian's.  Tests that need
root (SCHED_FIFO, mlockall, ping -f) are marked and skipped without it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parents[1]

# Built probes (and later kernel sources and ccache) are cached in a
# gitignored folder of the checkout so a warm `make test` is fast.
os.environ.setdefault("RTFORGE_CACHE_DIR", str(REPO / ".cache" / "rtforge"))

from rtforge.measure.probebuild import build_probe  # noqa: E402
from rtforge.results.store.runstore import Store  # noqa: E402

# the xdist groups and the budget printed at the end of every run
from .support.budget import mark_groups, pytest_runtest_logreport, pytest_terminal_summary  # noqa: E402, F401

IS_ROOT = os.geteuid() == 0

# `make test` (what CI runs) draws the same Hypothesis examples every run, so
# a submission is judged on its code and not on the examples it drew; `make
# check`, the developers' loop, draws new ones each time and finds what a
# random CI run would have (the CRLF bug of bootcheck was such a find).
settings.register_profile("fixed", derandomize=True)
if os.environ.get("RTFORGE_HYPOTHESIS") == "fixed":
    settings.load_profile("fixed")

# A session started in the background by a non-interactive shell (`make test &`)
# inherits SIGINT ignored, and so would every rtforge it starts: the Ctrl-C
# tests would see their signal ignored.  A handler (unlike SIG_IGN) is reset
# to the default in a child at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# tryfirst: xdist's own collection hook turns the xdist_group marks into the
# "@group" suffix its loadgroup scheduler reads; marks added after it are lost.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs root for SCHED_FIFO/mlockall (CI runs as root)")
    for item in items:
        if "root" in item.keywords and not IS_ROOT:
            item.add_marker(skip)
    mark_groups(items)   # which tests run one after the other on one worker (tests/support/budget.py)


@pytest.fixture(scope="session")
def probe() -> Path:
    return build_probe()


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(tmp_path / "results")


@pytest.fixture
def rtforge_cmd():
    """argv prefix to run the installed CLI as a separate process."""
    return [sys.executable, "-m", "rtforge"]


def run_probe(probe: Path, *args, timeout=60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(probe), *map(str, args)], capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    """A real sshd on loopback (needs root: it creates its test users, and
    removes them at the end, whatever happened)."""
    if not IS_ROOT:
        pytest.skip("the loopback sshd needs root")
    import shutil

    from .support.sshd import create_users, make_sshd, remove_users, session_dir

    users = create_users()
    base = server = None
    try:
        base = session_dir()
        server = make_sshd(base, users.names)
        yield server
    finally:
        if server is not None:
            server.stop()
        remove_users(users.created)
        if base is not None:
            shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def link(sshd):
    """An SshTransport to the loopback sshd as root (no run folders touched)."""
    from rtforge.device import SshTransport

    t = SshTransport("board", ssh_config=sshd.ssh_config)
    yield t
    t.close()


@pytest.fixture
def board(sshd):
    """The loopback sshd as a board, empty at the start and cleaned up after.
    This machine's /var/lib/rtforge is the test board's: runs found there
    were left by an interrupted earlier test session (its processes stopped
    with it) and would be fetched as this test's."""
    from rtforge.device import SshTransport

    from .support.remoteboard import clean_board

    clean_board(set())
    t = SshTransport("board", ssh_config=sshd.ssh_config)
    yield t
    t.close()
    clean_board(set())


@pytest.fixture
def pi_root():
    """An empty folder to hold a simulated Pi's tree (tests/support/simpi.py).
    Not under pytest's private tmp dir: a non-root login must be able to
    read it, as it reads /boot on a real Pi."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="rtforge-pi-"))
    base.chmod(0o755)
    yield base / "pi"
    shutil.rmtree(base, ignore_errors=True)


# --- the QEMU guest: a real Debian PC booting through GRUB (tests/guest.py) ---
GUEST_TOOLS = {"qemu-system-x86_64": "qemu-system-x86", "qemu-img": "qemu-utils", "debootstrap": "debootstrap",
               "sfdisk": "fdisk", "mke2fs": "e2fsprogs"}


@pytest.fixture(scope="session")
def guest_image(pytestconfig):
    """The cached guest disk image and its kernel packages (tests/guestimage.py).
    Built on first use (minutes, progress shown live), then reused."""
    if not IS_ROOT:
        pytest.skip("the guest image is built with debootstrap and chroot, which need root")
    import shutil

    from .support.guestimage import ensure_image

    missing = sorted({pkg for tool, pkg in GUEST_TOOLS.items() if not shutil.which(tool)})
    if missing:  # not a skip: `make setup` installs them, so their absence is a broken setup
        pytest.fail(f"the guest tests need Debian's {' '.join(missing)} (apt-get install {' '.join(missing)})")
    import contextlib

    capman = pytestconfig.pluginmanager.getplugin("capturemanager")  # None under -p no:capture
    # a cold build takes minutes: show its progress even while output is captured
    with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
        return ensure_image()


@pytest.fixture
def guest(guest_image, tmp_path):
    """A pristine guest (own qcow2 overlay on the cached image), booted through
    GRUB and answering SSH: `ssh -F guest.ssh_config guest` (root) or
    `guest-sudo`; see tests/guest.py for the rest of its API."""
    from .support.guest import running_guest

    with running_guest(guest_image, tmp_path / "guest") as g:
        yield g


@pytest.fixture(scope="session")
def rt_guest_image(guest_image, tmp_path_factory):
    """The guest image after `rtforge deploy` put Debian's RT kernel on it
    (tests/support/rtguest.py): one deploy per session, judged by
    tests/e2e/test_deploy_grub.py, booted by the tests that need RT."""
    from .support.rtguest import deploy_rt

    return deploy_rt(guest_image, tmp_path_factory.mktemp("rt-guest"))


@pytest.fixture
def rt_guest(rt_guest_image, tmp_path):
    """A pristine guest booting the deployed RT kernel by default (its own
    overlay on the deployed disk)."""
    from .support.guest import running_guest

    if not rt_guest_image.ok:
        pytest.fail(f"the RT kernel could not be deployed on the guest: {rt_guest_image.why()}")
    with running_guest(rt_guest_image, tmp_path / "guest") as g:
        yield g


# --- the tests' kernels, one per architecture (tests/support/testkernels.py) ---
@pytest.fixture(scope="session")
def pi1_kernel(tmp_path_factory):
    """The Pi 1 / Zero board's lean RT kernel from Debian's 7.3 (allnoconfig
    plus what raspi0 and raspi1ap need), built by rtforge, no .debs."""
    from .support.testkernels import build_test_kernel, spec_of
    return build_test_kernel(spec_of("pi1", tmp_path_factory.mktemp("pi1-dist")))


@pytest.fixture(scope="session")
def arm64_kernel(tmp_path_factory):
    """qemu-virt-arm64's RT kernel from Debian's 6.12 with 16K pages and
    modules, built and packaged (.debs, headers) by rtforge."""
    from .support.testkernels import build_test_kernel, spec_of
    return build_test_kernel(spec_of("arm64", tmp_path_factory.mktemp("arm64-dist")))


# --- Debian's kernel trees, extracted once into the cache (tests/support/kernelsrc.py) ---
@pytest.fixture(scope="session")
def src612():
    from rtforge.kernel.sources import prepare_source
    return prepare_source("debian:6.12")


@pytest.fixture(scope="session")
def src61():
    from rtforge.kernel.sources import prepare_source
    return prepare_source("debian:6.1")


@pytest.fixture(scope="session")
def src73():
    """Debian's linux-source-7.3 (trixie-backports), downloaded by rtforge's own apt."""
    from rtforge.kernel.sources import prepare_source
    return prepare_source("debian:7.3")


@pytest.fixture(scope="module")
def rpi_git(src612):
    """The raspberrypi/linux stand-in (tests/support/rpirepo.py) and the
    commit its tag names; rtforge fetches it while the module runs."""
    from rtforge.kernel.sources import ENV_RPI_GIT_URL

    from .support.rpirepo import rpi_layout_repo

    repo, commit = rpi_layout_repo(src612)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV_RPI_GIT_URL, f"file://{repo}")
        yield repo, commit


@pytest.fixture(scope="module")
def kernel_cache_cleanup():
    """Cache entries a test module made go after it (only this process's:
    support/kernelsrc.py); the Debian trees stay, that is the point of the
    cache.  Modules opt in
    with pytestmark = pytest.mark.usefixtures("kernel_cache_cleanup")."""
    from .support.kernelsrc import cache_entries_removed_after
    with cache_entries_removed_after():
        yield


# --- boot partitions for bootcheck (tests/support/bootfiles.py) ---
@pytest.fixture
def pios(tmp_path):
    """A Raspberry Pi OS (bookworm) boot partition in a temp dir: every
    standard kernel with its real header kind, every initramfs and dtb."""
    from .support.bootfiles import pi_boot_partition
    return pi_boot_partition(tmp_path)
