"""Every Pi CPU runs the programs rtforge puts on a board: the probe, the
N-queens benchmark and the boot test's /init, each built for the board's
`uname -m` (armv6l, armv7l, aarch64) and run under qemu-user as each CPU the
board files name (arm1176, cortex-a7, cortex-a53, cortex-a72, cortex-a76).

The trap this guards against is real: Debian's armhf code is ARMv7 with
Thumb-2, and a Pi 1's ARM1176 (ARMv6) dies of SIGILL on it -- the first try
of a Pi 1 kernel found its /init doing exactly that."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from rtforge.kernel.boards import load_boards
from rtforge.measure.probebuild import build_probe, build_program

from ..support.qemu_user import EM_AARCH64, EM_ARM, elf_facts, qemu_user, sandbox_works, sandboxed


def pi_cpus() -> list[tuple[str, str]]:
    """(uname -m, qemu-user CPU) of every Pi board file, once each."""
    pairs = {(b.uname_m[0], cpu) for b in load_boards().values() if b.models for cpu in b.user_cpus}
    return sorted(pairs)


PI_CPUS = pi_cpus()
IDS = [f"{m}-{c}" for m, c in PI_CPUS]
A000170 = {6: 4, 7: 40, 8: 92}        # N-queens solution counts (OEIS A000170)


def test_the_board_files_name_every_pi_cpu():
    assert {c for _, c in PI_CPUS} >= {"arm1176", "cortex-a7", "cortex-a53", "cortex-a72", "cortex-a76"}
    assert {m for m, _ in PI_CPUS} == {"armv6l", "armv7l", "aarch64"}


@pytest.mark.root
@pytest.mark.parametrize("machine, cpu", PI_CPUS, ids=IDS)
def test_probe_measures_on_each_pi_cpu(machine, cpu, tmp_path):
    probe = build_probe(machine, static=True)
    # static: it needs no libc on the board
    assert elf_facts(probe) == (EM_ARM if machine.startswith("arm") else EM_AARCH64, False)
    out = tmp_path / "run"
    p = subprocess.run([str(qemu_user(machine)), "-cpu", cpu, str(probe), "--out", str(out), "--duration-s", "1",
                        "--interval-us", "1000"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    doc = json.loads((out / "probe.json").read_text())
    assert doc["meta"]["uname"]["machine"] == machine
    counts = [c["count"] for c in doc["cpus"]]
    assert counts and all(n > 100 for n in counts), counts       # ~1000 wake-ups a second, emulated


@pytest.mark.parametrize("machine, cpu", PI_CPUS, ids=IDS)
def test_nqueens_counts_right_on_each_pi_cpu(machine, cpu):
    solver = build_program("nqueens", "nqueens", machine, static=True)
    assert elf_facts(solver) == (EM_ARM if machine.startswith("arm") else EM_AARCH64, False)
    for n, solutions in A000170.items():
        p = subprocess.run([str(qemu_user(machine)), "-cpu", cpu, str(solver), "--n", str(n), "--threads", "2"],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["solutions"] == solutions


def test_armv7_code_dies_on_a_pi_1_cpu():
    """The check above can fail: Debian armhf code on the ARM1176 is SIGILL."""
    solver = build_program("nqueens", "nqueens", "armv7l", static=True)
    p = subprocess.run([str(qemu_user("armv7l")), "-cpu", "arm1176", str(solver), "--n", "6", "--threads", "1"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == -4 or p.returncode == 128 + 4 or "Illegal instruction" in p.stderr, (p.returncode, p.stderr)


@pytest.fixture(scope="module")
def binfmt_sandbox():
    why = sandbox_works()
    if why:
        pytest.skip(why)


@pytest.mark.parametrize("machine, cpu", PI_CPUS, ids=IDS)
def test_boot_init_runs_on_each_pi_cpu(binfmt_sandbox, machine, cpu, tmp_path):
    """/init as the boot test runs it -- process 1 of its own namespace, in a
    root holding only itself and the probe -- reports the machine and starts
    the probe (which then finds no real-time privilege in the sandbox)."""
    root = tmp_path / "initramfs"
    root.mkdir()
    shutil.copy(build_program("bootinit", "rtforge-init", machine, static=True), root / "init")
    shutil.copy(build_probe(machine, static=True), root / "rtprobe")
    os.chmod(tmp_path, 0o755)
    p = sandboxed(machine, cpu, ["/init"], chroot=root)
    out = p.stdout
    assert f"RTFORGE-UNAME-M {machine}" in out, (p.returncode, out[-500:], p.stderr[-500:])
    assert "RTFORGE-DONE" in out
    exit_line = next(line for line in out.splitlines() if line.startswith("RTFORGE-PROBE-EXIT"))
    probe_exit = int(exit_line.split()[1])
    assert probe_exit < 126, f"the probe did not run: {exit_line}"     # 127: not found, 128+n: killed by signal n


def test_boot_init_for_armv7_dies_on_a_pi_1_cpu(binfmt_sandbox, tmp_path):
    """What the first Pi 1 boot test did: armv7l /init on an ARM1176."""
    root = tmp_path / "initramfs"
    root.mkdir()
    shutil.copy(build_program("bootinit", "rtforge-init", "armv7l", static=True), root / "init")
    os.chmod(tmp_path, 0o755)
    p = sandboxed("armv7l", "arm1176", ["/init"], chroot=root, timeout=60)
    assert "RTFORGE-DONE" not in p.stdout and "Illegal instruction" in p.stderr


@pytest.fixture
def pi1_userland(binfmt_sandbox, tmp_path):
    """A board whose every program is armel/armv6l, run as an ARM1176: busybox
    (Debian's armel busybox-static) is its only shell and tool set."""
    from ..support.armboard import ArmBoard, make_root

    root = tmp_path / "pi1-root"
    os.chmod(tmp_path, 0o755)
    make_root(root, "arm1176")
    board = ArmBoard(root, "arm1176")
    yield board
    board.kill_leftovers()


@pytest.mark.slow
def test_runner_on_busybox_as_a_pi_1(pi1_userland, tmp_path):
    """The run lifecycle's board side -- runner.sh on busybox ash, its setsid,
    tar and sha256sum, the armv6l probe and N-queens -- as a Pi 1 runs it: a
    benchmark (no real-time privilege needed) started, followed, fetched
    with every file checked, stored."""
    from rtforge.measure.bench import BenchSpec, run_bench
    from rtforge.results.store.runstore import Store

    store = Store(tmp_path / "results")
    result = run_bench(BenchSpec(n=7, threads=[1], repeat=2, warmup=0, stress_s=0), store, transport=pi1_userland)
    assert result.state == "complete" and result.kind == "bench"
    assert result.system.get("machine") == "armv6l"
    runner_dir = store.run_dir(result.run_id) / "raw"
    assert (runner_dir / "runner").is_dir()
    solves = json.dumps(result.to_dict())
    assert '"solutions": 40' in solves or '"solutions":40' in solves     # N=7 has 40 (OEIS A000170)
    assert not pi1_userland.leftovers()          # the runner ended everything it started
