"""The pieces of the GRUB command line try (device/deploy/grubcmdline.py), on a
grub.cfg written by Debian 12's own grub-mkconfig (captured from the QEMU
guest, tests/fixtures/grub/): the running kernel's entry found in its
submenu, copied with new parameters into a script that a real `sh` prints
back exactly.  The whole path with real reboots is tests/e2e/test_tune_grub.py."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from rtforge.device.deploy.grubcmdline import (
    TRY_ID,
    TRY_TITLE,
    GrubCmdline,
    dropin_text,
    dropin_words,
    entry_block,
    linux_params,
    try_entry,
    try_script,
)
from rtforge.device.deploy.grubtry import menu_entries
from rtforge.errors import UserError

CFG = (Path(__file__).parents[2] / "fixtures" / "grub" / "debian12-grub.cfg").read_text()
RELEASE = re.search(r"vmlinuz-(\S+)", CFG)[1]


def test_the_running_kernels_entry_is_found_inside_the_submenu():
    entry = menu_entries(CFG)[RELEASE]
    assert ">" in entry                                   # Debian's "Advanced options" submenu
    block = entry_block(CFG, entry)
    assert block[0].startswith("menuentry ") and entry.split(">")[1] in block[0] and block[-1] == "}"
    assert sum(line.startswith("linux") for line in block) == 1
    assert any(line.startswith("initrd") and f"initrd.img-{RELEASE}" in line for line in block)
    # the recovery entry of the same kernel is another block
    assert not any("recovery" in line or "single" in line.split() for line in block)
    with pytest.raises(UserError, match="no complete menu entry"):
        entry_block(CFG, "gnulinux-no-such-entry")


def test_the_try_entry_is_the_running_one_with_new_parameters_and_sh_prints_it_back(tmp_path):
    block = entry_block(CFG, menu_entries(CFG)[RELEASE])
    params = [*linux_params(block), "nohz_full=1", "rtforge.try=0a1b2c3d"]
    entry = try_entry(block, params)
    script = tmp_path / "42_rtforge_try"
    script.write_text(try_script(entry, "nohz_full=1"))
    printed = subprocess.run(["sh", str(script)], capture_output=True, text=True, check=True).stdout
    assert printed == entry
    lines = entry.splitlines()
    assert lines[0] == f"menuentry '{TRY_TITLE}' --id {TRY_ID} {{" and lines[-1] == "}"
    assert len(f"Booting `{TRY_TITLE}'") < 80          # GRUB's console line, unwrapped
    linux = next(line.strip() for line in lines if line.strip().startswith("linux"))
    original = next(line for line in block if line.startswith("linux"))
    assert linux.split() == [*original.split()[:2], *params]
    # every other line of the block is copied as it is (search, insmod, initrd, echo)
    assert [line.strip() for line in lines[1:-1] if not line.strip().startswith("linux")] == \
        [line for line in block[1:-1] if not line.startswith("linux")]


def test_an_entry_with_two_linux_lines_is_not_copied():
    with pytest.raises(UserError, match="2 linux lines"):
        linux_params(["menuentry 'x' {", "linux /a ro", "linux /b ro", "}"])


@pytest.mark.parametrize("word", ["a'b", 'a"b', "a{b", "a}b", "a;b", "a#b", "$x", "a`b", "a b", "a\\b"])
def test_words_grub_or_the_shell_would_read_otherwise_are_refused(word):
    with pytest.raises(UserError, match="cannot go on a GRUB command line"):
        GrubCmdline(["nohz_full=1", word], [], None, "x")


def test_dropin_words_read_back_what_dropin_text_wrote():
    words = ["isolcpus=managed_irq,domain,1", "nohz_full=1"]
    assert dropin_words(dropin_text(words)) == words
    assert dropin_words(None) == [] and dropin_words('GRUB_CMDLINE_LINUX="quiet"\n') == []
