"""bootcheck on a config.txt that is not plain text: a UTF-8 byte-order
mark (Windows Notepad), UTF-16 (PowerShell's `>`), binary garbage.  The
documented format is one property=value a line of plain text (What is
config.txt, File format); the firmware compares bytes, so such a file loses
its settings -- and bootcheck must say so instead of "no warnings"."""

from __future__ import annotations

import os

import pytest

from rtforge.cli import main
from rtforge.device.firmware.bootcfg import resolve

from ...support.bootfiles import pi_boot_partition

CONFIG = "arm_64bit=1\nkernel=kernel8-rt.img\n"


@pytest.fixture
def boot(tmp_path):
    return pi_boot_partition(tmp_path, {"kernel8-rt.img": b"\0" * 64})


def warnings_for(boot, data: bytes, model="pi4"):
    (boot / "config.txt").write_bytes(data)
    return resolve(boot, model)


def test_plain_text_gives_the_kernel_and_no_warning(boot):
    c = warnings_for(boot, CONFIG.encode())
    assert c.kernel == "kernel8-rt.img" and c.warnings == []
    # 8-bit text in a comment (latin-1 or UTF-8) is text, not binary
    c = warnings_for(boot, "# Configuración de Pi, ©\n".encode() + "# café\n".encode("latin-1") + CONFIG.encode())
    assert c.kernel == "kernel8-rt.img" and c.warnings == []


def test_utf8_bom_before_a_setting_is_named(boot):
    c = warnings_for(boot, b"\xef\xbb\xbf" + b"kernel=kernel8-rt.img\n")
    assert any("starts with a UTF-8 byte-order mark" in w and "'kernel=kernel8-rt.img' on config.txt:1" in w
               and "save the file as UTF-8 without a byte-order mark" in w for w in c.warnings), c.warnings


def test_utf8_bom_before_a_comment_is_harmless(boot):
    c = warnings_for(boot, b"\xef\xbb\xbf# made on Windows\n" + CONFIG.encode())
    assert c.kernel == "kernel8-rt.img" and c.warnings == []


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-le", "utf-16-be"])  # with BOM, and both orders without
def test_utf16_is_named_with_the_lines_it_loses(boot, codec):
    c = warnings_for(boot, CONFIG.encode(codec))
    assert c.kernel == "kernel8.img"  # none of its lines is read: the default kernel
    assert any("config.txt is UTF-16 text" in w and "kernel=kernel8-rt.img" in w and "save it as plain text" in w
               for w in c.warnings), c.warnings


def test_binary_is_named(boot):
    c = warnings_for(boot, os.urandom(300) + b"\0\0" + CONFIG.encode())
    assert any("config.txt is not a text file" in w and "restore it from a backup" in w for w in c.warnings), \
        c.warnings


def test_an_included_utf16_file_is_named_too(boot):
    (boot / "extra.txt").write_bytes("kernel=kernel8-rt.img\n".encode("utf-16"))
    c = warnings_for(boot, b"include extra.txt\n")
    assert any(w.startswith("extra.txt is UTF-16 text") for w in c.warnings), c.warnings


def test_the_cli_warns_instead_of_no_warnings(boot, capsys):
    (boot / "config.txt").write_bytes(CONFIG.encode("utf-16"))
    assert main(["bootcheck", str(boot), "--model", "pi4"]) == 0
    out = capsys.readouterr().out
    assert "warning: config.txt is UTF-16 text" in out and "no warnings" not in out.split("tryboot")[0]
