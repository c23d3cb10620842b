"""Board files: every Raspberry Pi row of docs/kernels.md ("the Raspberry Pi facts"), checked against the real
6.12 tree for the mainline flavour and for form for the raspberrypi one."""

from __future__ import annotations

import glob
import json
import re
from importlib import resources

import pytest

from rtforge.cli import main
from rtforge.errors import UserError
from rtforge.kernel.boards import (
    FLAVOURS,
    BoardFileError,
    defconfig_exists,
    get_board,
    load_boards,
    machines,
    model_key,
    parse_board,
    parse_machines,
)

pytestmark = pytest.mark.usefixtures("kernel_cache_cleanup")


# docs/kernels.md "The Raspberry Pi facts the code relies on": (raspberrypi defconfig, ARCH, stock image),
# one board each.
PI_ROWS = [
    ("bcmrpi_defconfig", "arm", "kernel.img"),
    ("bcm2709_defconfig", "arm", "kernel7.img"),
    ("bcm2711_defconfig", "arm", "kernel7l.img"),
    ("bcm2711_defconfig", "arm64", "kernel8.img"),
    ("bcm2712_defconfig", "arm64", "kernel_2712.img"),
]
OTHER_BOARDS = ["mainline-arm64", "qemu-virt-arm64", "qemu-virt-arm", "x86-64"]


def board_text(name: str) -> str:
    return (resources.files("rtforge.data") / "boards" / f"{name}.toml").read_text()


@pytest.mark.parametrize("defconfig,arch,stock", PI_ROWS)
def test_every_pi_row_has_exactly_one_board(defconfig, arch, stock):
    matches = [b for b in load_boards().values()
               if b.defconfig.get("raspberrypi") == defconfig and b.arch == arch and b.stock_image_name == stock]
    assert len(matches) == 1, f"{defconfig}/{arch}/{stock}: {[b.name for b in matches]}"
    b = matches[0]
    assert b.image_name != stock and b.image_name.endswith(".img")
    assert b.cross_compile == {"arm": "arm-linux-gnueabihf-", "arm64": "aarch64-linux-gnu-"}[arch]
    assert b.models and b.uname_m


def test_the_names_users_type():
    assert {"mainline-arm64", "qemu-virt-arm64", "qemu-virt-arm", "x86-64", "pi1", "pi4-64", "pi5"} <= set(
        load_boards()
    )
    assert get_board("pi3-64").name == "pi4-64"  # one kernel for the 64-bit Pi 3/4 row
    assert get_board("pi3-32").name == "pi2"
    assert get_board("PI0").name == "pi1"
    assert get_board("pi4-64").image_name == "kernel8-rtforge.img"
    assert get_board("pi1").image_target == "zImage" and get_board("x86-64").image_target == "bzImage"
    assert get_board("pi4-64").image_path == "arch/arm64/boot/Image"
    assert get_board("x86-64").srcarch == "x86"


def test_an_unknown_board_names_the_close_ones_or_all():
    with pytest.raises(UserError) as e:
        get_board("pi9")                      # close to pi1, pi2, pi5: those, with what they are
    assert "did you mean" in str(e.value) and "pi5 (Raspberry Pi 5" in str(e.value)
    with pytest.raises(UserError) as e:
        get_board("beaglebone")               # close to nothing: every board
    for name in load_boards():
        assert name in str(e.value)


def test_image_names_never_collide():
    boards = list(load_boards().values())
    names = [b.image_name for b in boards]
    assert len(names) == len(set(names))
    stock = {b.stock_image_name for b in boards}
    assert not stock & set(names)


def test_every_board_file_has_every_key_and_no_other():
    text = board_text("pi4-64")
    parse_board("pi4-64", text)  # the shipped file is fine
    with pytest.raises(BoardFileError, match="missing keys \\['image_name'\\]"):
        parse_board("x", re.sub(r"(?m)^image_name = .*\n", "", text))
    with pytest.raises(BoardFileError, match="unknown keys \\['imagename'\\]"):
        parse_board("x", text.replace("image_name =", "imagename =", 1))
    with pytest.raises(BoardFileError, match="unknown flavours"):
        parse_board("x", text.replace("[defconfig]\nraspberrypi", "[defconfig]\nraspbian", 1))
    with pytest.raises(BoardFileError, match="not an image"):
        parse_board("x", text.replace('image_target = "Image"', 'image_target = "zImage"'))
    with pytest.raises(BoardFileError, match="different from stock"):
        parse_board("x", text.replace('"kernel8-rtforge.img"', '"kernel8.img"'))
    with pytest.raises(
        BoardFileError, match=r"\[\[emulated\]\] #1: missing keys \['machine'\], unknown keys \['machin'\]"
    ):
        parse_board("x", text.replace('machine = "raspi3b"', 'machin = "raspi3b"'))
    # what belongs to QEMU's machine is in data/machines.toml, not in a board file
    with pytest.raises(BoardFileError, match=r"#1: missing keys \[\], unknown keys \['console'\]"):
        parse_board("x", text.replace('machine = "raspi3b"', 'machine = "raspi3b"\nconsole = "console=ttyS0"'))
    with pytest.raises(BoardFileError, match="machine 'raspi5' is not in data/machines.toml"):
        parse_board("x", text.replace('machine = "raspi3b"', 'machine = "raspi5"'))


def test_machines_file_is_checked_and_every_quirk_says_its_gap():
    text = (resources.files("rtforge.data") / "machines.toml").read_text()
    assert set(parse_machines(text)) >= {"raspi0", "raspi1ap", "raspi2b", "raspi3ap", "raspi3b", "raspi4b", "virt"}
    with pytest.raises(BoardFileError, match=r"\[raspi0\]: every quirk says which gap"):
        parse_machines(re.sub(r'(?m)^("initcall_blacklist=[^"]*") = ".*"$', r'\1 = ""', text, count=1))
    with pytest.raises(BoardFileError, match=r"\[raspi0\]: missing keys \['console'\]"):
        parse_machines(text.replace('console = "console=ttyAMA0,115200 earlycon=pl011,0x20201000"\n', "", 1))


def test_a_machines_quirks_reach_every_board_booted_on_it():
    """The gaps are QEMU's machine's: every kernel booted there gets the same
    words (until 2026-11-25 mainline-arm64, pi4-64's defconfig, was listed on
    raspi4b without the three words that kernel needs there)."""
    seen = 0
    for b in load_boards().values():
        for e in b.emulated:
            m = machines()[e.machine]
            assert e.append().split()[: len(m["console"].split())] == m["console"].split(), (b.name, e.machine)
            assert set(m["quirks"]) <= set(e.append().split()), (b.name, e.machine)
            assert set(e.qemu_args()) == {a for q in m["qemu_quirks"] for a in q.split()}, (b.name, e.machine)
            seen += e.machine == "raspi4b"
    assert seen == 3  # pi4-32, pi4-64, mainline-arm64
    raspi4b = {b.name: next(e for e in b.emulated if e.machine == "raspi4b") for b in load_boards().values()
               if any(e.machine == "raspi4b" for e in b.emulated)}
    assert "clk_ignore_unused" in raspi4b["mainline-arm64"].append()
    # a 32-bit kernel there is entered through the AArch32 stub, and says so
    assert "AArch32 start" in raspi4b["pi4-32"].what and "AArch32" not in raspi4b["pi4-64"].what


def test_raspberrypi_defconfig_names_have_the_right_form():
    # Checked by hand against raspberrypi/linux (see the comments in the board
    # files); a test can only check the form here.
    for b in load_boards().values():
        name = b.defconfig.get("raspberrypi")
        assert name and re.fullmatch(r"[a-z0-9_]+_defconfig|defconfig|allnoconfig", name), b.name


def test_mainline_defconfigs_exist_in_the_real_6_12_tree(src612):
    for b in load_boards().values():
        name = b.defconfig_in(src612.path, "mainline")  # raises UserError if missing
        assert defconfig_exists(src612.path, b.srcarch, name)
    # and the check can fail: a raspberrypi-only defconfig is not in mainline
    with pytest.raises(UserError, match="bcm2711_defconfig"):
        get_board("pi4-64").defconfig_in(src612.path, "raspberrypi")
    assert not defconfig_exists(src612.path, "arm", "bcm2709_defconfig")


def _dts_matches(tree, srcarch: str, pattern: str) -> list[str]:
    return glob.glob(str(tree / "arch" / srcarch / "boot" / "dts" / pattern.replace(".dtb", ".dts")))


def test_mainline_device_tree_globs_match_real_dts_files(src612):
    for b in load_boards().values():
        globs = b.dtb_globs("mainline")
        if globs:
            assert any(_dts_matches(src612.path, b.srcarch, g) for g in globs), b.name
        for e in b.emulated:
            if dtb := e.dtb.get("mainline"):
                assert _dts_matches(src612.path, b.srcarch, dtb), (b.name, e.machine, dtb)


def test_models_as_proc_device_tree_shows_them():
    pi4 = "Raspberry Pi 4 Model B Rev 1.4\x00"
    assert model_key(pi4) == "Raspberry Pi 4 Model B"
    assert [b.name for b in load_boards().values() if b.fits_model(pi4) and b.models] == [
        "mainline-arm64",
        "pi4-32",
        "pi4-64",
    ]
    # "Compute Module" (CM1) must not swallow CM3/CM4
    cm1 = "Raspberry Pi Compute Module Rev 1.0"
    assert [b.name for b in load_boards().values() if b.fits_model(cm1) and b.models] == ["pi1"]
    assert not get_board("pi4-64").fits_model("Raspberry Pi Compute Module Rev 1.0")
    assert get_board("pi2").fits_model("Raspberry Pi 3 Model B Plus Rev 1.3")
    assert get_board("pi5").fits_model("Raspberry Pi 5 Model B Rev 1.0")
    assert not get_board("pi5").fits_model(pi4)
    assert get_board("qemu-virt-arm64").fits_model("linux,dummy-virt")  # no models: no check
    assert get_board("pi1").fits_machine("armv6l\n") and not get_board("pi1").fits_machine("armv7l")


def test_cli_lists_every_board(capsys):
    assert main(["kernel", "boards"]) == 0
    out = capsys.readouterr().out
    for b in load_boards().values():
        assert b.name in out and b.image_name in out
    assert main(["kernel", "boards", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == list(load_boards())
    pi5 = next(r for r in rows if r["name"] == "pi5")
    assert pi5["defconfig"] == {"raspberrypi": "bcm2712_defconfig", "mainline": "defconfig"}
    assert pi5["image_path"] == "arch/arm64/boot/Image" and set(pi5["dtbs"]) == set(FLAVOURS)


def test_cli_unknown_board_is_one_line_exit_2(capsys):
    assert main(["kernel", "source", "debian:6.12", "--board", "pi9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown board 'pi9'" in err[0]


def _qemu_list(argv: list[str]) -> set[str]:
    """The first word of each line QEMU prints for -M help / -cpu help."""
    import subprocess

    out = subprocess.run(argv, capture_output=True, text=True).stdout  # qemu-user's -cpu help exits 1
    return {
        line.split()[0] for line in out.splitlines() if line.strip() and not line.startswith(("Supported", "Available"))
    }


def test_emulated_machines_and_cpus_are_ones_qemu_has():
    """QEMU's own lists are the judge (raspi4b needs QEMU >= 9: make setup
    installs QEMU from bookworm-backports)."""
    from rtforge.kernel.boottest import qemu_exe

    for b in load_boards().values():
        for e in b.emulated:
            exe = qemu_exe(b.arch, e.machine)
            assert e.machine in _qemu_list([exe, "-M", "help"]), (b.name, exe, e.machine)
            if e.cpu:
                assert e.cpu in _qemu_list([exe, "-cpu", "help"]), (b.name, e.cpu)
        user = (
            "qemu-aarch64-static"
            if b.uname_m[0] == "aarch64"
            else ("qemu-arm-static" if b.uname_m[0].startswith("arm") else None)
        )
        if user:
            assert set(b.user_cpus) <= _qemu_list([user, "-cpu", "help"]), (b.name, b.user_cpus)


def test_kernel_boards_says_the_pi_5_has_no_emulated_machine(capsys):
    assert main(["kernel", "boards"]) == 0
    out = capsys.readouterr().out
    pi5_row = out[out.index("pi5") :]
    assert "no emulated board;" in pi5_row and "cortex-a76 stands in" in pi5_row
    assert main(["kernel", "boards", "--json"]) == 0
    pi5 = next(b for b in json.loads(capsys.readouterr().out) if b["name"] == "pi5")
    assert pi5["emulated"][0]["stand_in"] is True and pi5["user_cpus"] == ["cortex-a76"]


def test_user_cpus_are_the_cpus_of_the_boards_pis():
    """The qemu-user CPUs a board's programs are tested on are its Pis' own
    CPUs (pi_models.toml), except where qemu-arm has no 32-bit model of an
    ARMv8 core: "max" then stands for it."""
    from rtforge.device.firmware.pimodels import pi_model

    qemu_arm = _qemu_list(["qemu-arm-static", "-cpu", "help"])
    for b in load_boards().values():
        wanted = {pi_model(p).cpu for p in b.pis}
        if b.uname_m[0] == "armv7l":
            wanted = {c if c in qemu_arm else "max" for c in wanted}
        if b.pis:
            assert wanted == set(b.user_cpus), (b.name, wanted, b.user_cpus)


def test_every_pi_model_has_a_board_that_can_run_on_it():
    """Each model of pi_models.toml is some board's Pi (a model added
    without a board is caught), and a board names only Pis that run its
    kind of kernel: a 64-bit board's Pis run 64-bit kernels, a 32-bit
    board's have a default 32-bit kernel."""
    from rtforge.device.firmware.pimodels import pi_models

    models = pi_models()
    boards = [b for b in load_boards().values() if b.pis]
    assert set(models) == {p for b in boards for p in b.pis}
    for b in boards:
        for p in b.pis:
            m = models[p]
            assert m.runs_64bit if b.arch == "arm64" else m.kernel32, (b.name, p)
