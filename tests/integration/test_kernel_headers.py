"""The headers package's check (kernel/headers.py), on packages made here:
its build programs must be the board's CPU and its Module.symvers the
build's.  The real package of a real build, and a module built against it,
are test_kernel_match_build.py's; when the headers cannot be built here (a
signed-modules kernel without the board's libcrypto: the rule is
test_sign_file_for_the_board_needs_the_boards_libcrypto below), Kbuild's
profile packages the image without them, test_kernel_build.py's; which
rule a tree follows is read from Debian's real 6.12 and 6.1 trees."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rtforge.kernel.headers import cannot_build, check_headers, headers_rule

RELEASE = "6.12.117-rt-rtforge"


def test_which_trees_build_the_headers_programs_for_the_board(src612, src61):
    assert headers_rule(src612.path) == "target"       # install-extmod-build: HOSTCC="${CC}" when cross-compiling
    assert headers_rule(src61.path) == "host"          # builddeb copies scripts/ as built on this machine
    assert 'HOSTCC="${CC}"' in (src612.path / "scripts/package/install-extmod-build").read_text()


def program(tmp_path: Path, cc: str | None) -> Path:
    """A tiny ELF program for a CPU: this machine's (cc None: /bin/true) or a cross compiler's."""
    if cc is None:
        return Path("/bin/true")
    src = tmp_path / "p.c"
    src.write_text("int main(void) { return 0; }\n")
    out = tmp_path / f"p-{cc}"
    subprocess.run([cc, "-o", str(out), str(src)], check=True)
    return out


def make_deb(tmp_path: Path, prog: Path, symvers: bytes | None) -> Path:
    root = tmp_path / "pkg"
    top = root / f"usr/src/linux-headers-{RELEASE}"
    for rel in ("scripts/basic/fixdep", "scripts/mod/modpost"):
        (top / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(prog, top / rel)
    if symvers is not None:
        (top / "Module.symvers").write_bytes(symvers)
    (root / "DEBIAN").mkdir()
    (root / "DEBIAN/control").write_text(f"Package: linux-headers-{RELEASE}\nVersion: 1\nArchitecture: arm64\n"
                                         "Maintainer: t <t@example.org>\nDescription: test\n")
    deb = tmp_path / "h.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(root), str(deb)], check=True, capture_output=True)
    return deb


@pytest.fixture
def build(tmp_path):
    b = tmp_path / "build"
    b.mkdir()
    (b / "Module.symvers").write_bytes(b"0x12345678\tprintk\tvmlinux\tEXPORT_SYMBOL\t\n")
    return b


def test_programs_for_the_board_pass(tmp_path, build):
    deb = make_deb(tmp_path, program(tmp_path, "aarch64-linux-gnu-gcc"), (build / "Module.symvers").read_bytes())
    c = check_headers(deb, build, RELEASE, "arm64")
    assert c.ok and c.programs == {"scripts/basic/fixdep": "aarch64", "scripts/mod/modpost": "aarch64"}
    assert c.symvers_symbols == 1 and "build programs for aarch64" in c.sentence


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="this machine's programs are the board's CPU's")
def test_programs_for_this_machine_are_refused(tmp_path, build):
    deb = make_deb(tmp_path, program(tmp_path, None), (build / "Module.symvers").read_bytes())
    c = check_headers(deb, build, RELEASE, "arm64")
    assert not c.ok and "scripts/basic/fixdep is x86-64" in c.sentence and "the board is aarch64" in c.sentence


@pytest.mark.parametrize("symvers", [None, b"0x00000000\tprintk\tvmlinux\tEXPORT_SYMBOL\t\n"])
def test_a_module_symvers_other_than_the_builds_is_refused(tmp_path, build, symvers):
    deb = make_deb(tmp_path, program(tmp_path, "aarch64-linux-gnu-gcc"), symvers)
    c = check_headers(deb, build, RELEASE, "arm64")
    assert not c.ok and ("has no Module.symvers" if symvers is None else "other than the build's") in c.sentence


def test_sign_file_for_the_board_needs_the_boards_libcrypto(src612, src61):
    """Rebuilt for the board, sign-file links the board's libcrypto: without
    libssl-dev of that architecture here, the headers cannot be built."""
    signed = {"MODULES": "y", "MODULE_SIG_FORMAT": "y"}
    have = Path("/usr/lib/aarch64-linux-gnu/libcrypto.so").exists()
    why = cannot_build(src612.path, "aarch64-linux-gnu-", signed)
    assert (why is None) == have
    if why:
        assert "libssl-dev:arm64" in why and "dpkg --add-architecture arm64" in why
    assert cannot_build(src612.path, "aarch64-linux-gnu-", {"MODULES": "y"}) is None      # no sign-file
    assert cannot_build(src61.path, "aarch64-linux-gnu-", signed) is None                  # host programs: built here
    assert cannot_build(src612.path, "x86_64-linux-gnu-", signed) is None or not Path(
        "/usr/lib/x86_64-linux-gnu/libcrypto.so").exists()
