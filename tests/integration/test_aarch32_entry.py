"""A 32-bit kernel on QEMU's AArch64-only Pi machines (kernel/aarch32.py,
bootinit/aarch32-entry.S).

A tiny AArch32 program stands in for the zImage: it prints, on the PL011 of
raspi4b (a Pi 4's Cortex-A72) and raspi3b (a Pi 3's Cortex-A53), the
registers the ARM boot protocol (Documentation/arch/arm/booting.rst)
promises a kernel -- r0 = 0, r1 = ~0 for a device-tree boot, r2 = the
device tree -- plus its CPSR mode and the first word at r2; then it
releases the other three cores as a 32-bit kernel does (bcm2836-smp:
ARM-local mailbox 3 and an event) and prints the mode each reports from
its entry.  The expected values come from that document and the FDT format
(magic 0xd00dfeed, big-endian), not from the stub; QEMU's console is the
witness.  Without the stub the same image prints nothing: QEMU runs it as
AArch64 code.
"""

from __future__ import annotations

import os
import struct
import subprocess
import time

import pytest

from rtforge.kernel import aarch32
from rtforge.kernel.boottest import qemu_exe

# machine -> (PL011 UART0, ARM-local mailbox 3 set register of core 0): the
# BCM2711's peripherals in its low-peripheral map, the BCM2837's (QEMU's
# raspi4b and raspi3b; mainline bcm2711.dtsi / bcm2837.dtsi and the BCM2836
# ARM-local peripherals document, QA7: mailbox 3 set at 0x8c + 16 * core).
MACHINES = {"raspi4b": (0xFE201000, 0xFF80008C), "raspi3b": (0x3F201000, 0x4000008C)}

PROGRAM = r"""
	.arm
	.globl	_start
_start:
	mov	r4, r0
	mov	r5, r1
	mov	r6, r2
	mrs	r7, cpsr
	ldr	r8, =UART		@ the machine's PL011 (UART0)
	mov	r0, r4
	bl	hex
	mov	r0, r5
	bl	hex
	and	r0, r7, #0x1f		@ the mode: 0x13 is SVC
	bl	hex
	ldr	r0, [r6]		@ the first word of the device tree
	bl	hex
	mov	r9, #1			@ cores 1-3, as the kernel's bcm2836-smp releases them:
3:	ldr	r0, =MAILBOX3_SET0	@ its entry into the core's ARM-local mailbox 3, then an event
	add	r0, r0, r9, lsl #4
	adr	r1, secondary
	str	r1, [r0]
	dsb	sy
	sev
	adr	r2, flags
4:	ldr	r0, [r2, r9, lsl #2]	@ wait for the core's report: its CPSR mode
	cmp	r0, #0
	beq	4b
	bl	hex
	add	r9, r9, #1
	cmp	r9, #4
	blt	3b
	mov	r1, #'E'
	str	r1, [r8]
	mov	r1, #'\n'
	str	r1, [r8]
1:	b	1b
hex:	mov	r2, #28			@ r0 as 8 hex digits and a newline
2:	lsr	r1, r0, r2
	and	r1, r1, #15
	cmp	r1, #10
	addlt	r1, r1, #'0'
	addge	r1, r1, #('a' - 10)
	str	r1, [r8]
	subs	r2, r2, #4
	bpl	2b
	mov	r1, #'\n'
	str	r1, [r8]
	bx	lr
secondary:
	mrc	p15, 0, r4, c0, c0, 5	@ MPIDR: which core
	and	r4, r4, #3
	mrs	r5, cpsr
	and	r5, r5, #0x1f
	adr	r2, flags
	str	r5, [r2, r4, lsl #2]
	dsb	sy
5:	wfe
	b	5b
	.ltorg
flags:	.word	0, 0, 0, 0
"""


def minimal_fdt() -> bytes:
    """A flattened device tree with a root, /memory and /chosen: what QEMU's
    loader needs to fill in (FDT format v17, devicetree specification ch. 5)."""
    strings = b"#address-cells\0#size-cells\0device_type\0"
    off = {"#address-cells": 0, "#size-cells": 15, "device_type": 27}

    def pad(b: bytes) -> bytes:
        return b + b"\0" * (-len(b) % 4)

    def node(name: str, *props: bytes) -> bytes:
        return struct.pack(">I", 1) + pad(name.encode() + b"\0") + b"".join(props)

    def prop(name: str, value: bytes) -> bytes:
        return struct.pack(">III", 3, len(value), off[name]) + pad(value)

    end = struct.pack(">I", 2)
    body = (node("", prop("#address-cells", struct.pack(">I", 1)), prop("#size-cells", struct.pack(">I", 1)))
            + node("memory", prop("device_type", b"memory\0")) + end + node("chosen") + end + end
            + struct.pack(">I", 9))
    rsv = b"\0" * 16
    off_rsv, off_struct = 40, 56
    off_strings = off_struct + len(body)
    header = struct.pack(">10I", 0xD00DFEED, off_strings + len(strings), off_struct, off_strings, off_rsv, 17, 16, 0,
                         len(strings), len(body))
    return header + rsv + body + strings


def zimage_stand_in(tmp_path, machine):
    src, obj, raw = tmp_path / "prog.S", tmp_path / "prog.o", tmp_path / "prog.bin"
    uart, mailbox = MACHINES[machine]
    src.write_text(f"\t.equ\tUART, {uart:#x}\n\t.equ\tMAILBOX3_SET0, {mailbox:#x}\n" + PROGRAM)
    subprocess.run(["arm-linux-gnueabihf-gcc", "-c", "-o", str(obj), str(src)], check=True)
    subprocess.run(["arm-linux-gnueabihf-objcopy", "-O", "binary", "-j", ".text", str(obj), str(raw)], check=True)
    return raw


def console(machine, image, dtb, seconds: float = 20) -> str:
    argv = [qemu_exe("arm", machine), "-M", machine, "-nographic", "-monitor", "none", "-serial", "stdio",
            "-kernel", str(image), "-dtb", str(dtb)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    out, deadline = b"", time.monotonic() + seconds
    try:
        os.set_blocking(proc.stdout.fileno(), False)
        while time.monotonic() < deadline and b"E" not in out.split() and proc.poll() is None:
            out += proc.stdout.read() or b""
            time.sleep(0.1)
    finally:
        proc.kill()
        proc.wait()
    return out.decode(errors="replace")


@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_the_stub_enters_a_zimage_in_aarch32_svc_with_the_boot_protocol_registers(tmp_path, machine):
    dtb = tmp_path / "min.dtb"
    dtb.write_bytes(minimal_fdt())
    image = aarch32.wrap(zimage_stand_in(tmp_path, machine), tmp_path / "wrapped.img")
    assert image.stat().st_size == aarch32.STUB_SIZE + (tmp_path / "prog.bin").stat().st_size
    lines = console(machine, image, dtb).split()
    assert lines[:4] == ["00000000", "ffffffff", "00000013", "edfe0dd0"], lines
    assert lines[4:8] == ["00000013"] * 3 + ["E"], lines  # cores 1-3 released by mailbox, each in SVC


@pytest.mark.slow
def test_without_the_stub_qemu_runs_the_zimage_as_aarch64_code(tmp_path):
    dtb = tmp_path / "min.dtb"
    dtb.write_bytes(minimal_fdt())
    assert "E" not in console("raspi4b", zimage_stand_in(tmp_path, "raspi4b"), dtb, seconds=3)


def test_only_32_bit_kernels_on_aarch64_only_machines_get_the_stub():
    assert aarch32.needs_entry("arm", "raspi4b") and aarch32.needs_entry("arm", "raspi3b")
    assert not aarch32.needs_entry("arm64", "raspi4b")
    assert not aarch32.needs_entry("arm", "raspi2b") and not aarch32.needs_entry("arm", "virt")
