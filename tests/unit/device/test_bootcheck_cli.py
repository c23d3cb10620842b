"""`rtforge bootcheck` on the command line: exit codes, the --json shape, the
human output and one-sentence errors.  The firmware is simulated by rtforge's
firmware model (rtforge.device.firmware.bootcfg); the boot partitions are real trees."""

from __future__ import annotations

import json
import subprocess

import pytest

from rtforge.cli import main

from ...support.bootfiles import CMDLINE, PIOS_CONFIG, arm64_image, write


def test_cli_json_shape(pios, capsys):
    write(pios, {"kernel8-rt.img": arm64_image(), "tryboot.txt": PIOS_CONFIG + "kernel=kernel8-rt.img\n"})
    assert main(["bootcheck", str(pios), "--model", "pi4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out) == ["normal", "tryboot"]
    for mode in out.values():
        assert list(mode) == ["kernel", "dtb", "initramfs", "cmdline", "overlays", "warnings"]
    assert out["normal"] == {"kernel": "kernel8.img", "dtb": "bcm2711-rpi-4-b.dtb", "initramfs": "initramfs8",
                             "cmdline": CMDLINE, "overlays": "overlays/", "warnings": []}
    assert out["tryboot"]["kernel"] == "kernel8-rt.img" and out["tryboot"]["initramfs"] is None


def test_cli_human_output_says_why(pios, capsys):
    write(pios, {"kernel8-rt.img": arm64_image(), "config.txt": PIOS_CONFIG + "[pi5]\nkernel=kernel8-rt.img\n"})
    assert main(["bootcheck", str(pios), "-m", "pi5"]) == 0
    out = capsys.readouterr().out
    assert "normal boot: pi5 (Raspberry Pi 5) reads config.txt" in out
    assert "because: kernel=kernel8-rt.img (config.txt:21, in [pi5])" in out
    assert "tryboot (after reboot '0 tryboot'): pi5 (Raspberry Pi 5) reads tryboot.txt" in out
    assert "warning: tryboot.txt is missing" in out and f"text: {CMDLINE}" in out
    out.encode("ascii")


@pytest.mark.parametrize("argv,message", [
    (["--model", "pi4"], "is not a directory"),
    (["--model", "pi9"], "unknown model 'pi9': use one of pi0, pi0w, pi02, pi1, cm1, pi2, pi3, pi3+, cm3, cm3+, pi4"),
    ([], "Missing option '--model'"),
])
def test_cli_bad_input_is_one_sentence_and_exit_2(tmp_path, capsys, argv, message):
    assert main(["bootcheck", str(tmp_path / "nope"), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_cli_directory_without_config_txt(tmp_path, capsys):
    assert main(["bootcheck", str(tmp_path), "--model", "pi4", "--json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rtforge: error:") and "has no config.txt" in err and len(err.splitlines()) == 1


def test_cli_as_a_process(pios, rtforge_cmd):
    ok = subprocess.run([*rtforge_cmd, "bootcheck", str(pios), "--model", "cm4", "--json"],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and json.loads(ok.stdout)["normal"]["dtb"] == "bcm2711-rpi-cm4.dtb"
    bad = subprocess.run([*rtforge_cmd, "bootcheck", str(pios / "x"), "--model", "cm4"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and bad.stdout == ""
