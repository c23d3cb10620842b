"""Reading a failed boot's console: the panic, the faulting function, /init's
death, silence.  The real consoles are in tests/e2e/test_pi_boot.py (a Pi 1
kernel on QEMU's raspi0); these are the formats of the other architectures,
as their oops printers write them (arch/arm/kernel/process.c __show_regs,
arch/arm64/kernel/process.c __show_regs, arch/x86/kernel/dumpstack.c)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtforge.kernel.boottest import module_results
from rtforge.kernel.console import diagnose, explain_stop

ARM32 = """\
[    1.234] 8<--- cut here ---
[    1.235] Unhandled fault: external abort on non-linefetch (0x1008) at 0xdc8a0000
[    1.240] Internal error: : 1008 [#1] PREEMPT_RT ARM
[    1.250] PC is at bcm2835_power_probe+0x7c/0x2f8
[    1.251] LR is at devm_ioremap_resource+0x20/0x2c
[    1.300] Kernel panic - not syncing: Fatal exception
"""
ARM64 = """\
[    0.812] Internal error: Oops: 0000000096000010 [#1] PREEMPT_RT SMP
[    0.813] pc : bcm2835_power_probe+0xa4/0x3b0
[    0.813] lr : platform_probe+0x70/0xd0
[    0.900] Kernel panic - not syncing: Oops: Fatal exception
"""
X86 = """\
[    2.1] BUG: kernel NULL pointer dereference, address: 0000000000000008
[    2.1] RIP: 0010:e1000_probe+0x31/0x650 [e1000]
[    2.2] Kernel panic - not syncing: Fatal exception
"""
SIGILL_INIT = """\
[    3.0] Run /init as init process
[    3.1] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000004
[    3.1] CPU: 0 PID: 1 Comm: init Not tainted 7.3.4-rt-rtforge #1
"""


@pytest.mark.parametrize("text, function", [(ARM32, "bcm2835_power_probe"), (ARM64, "bcm2835_power_probe"),
                                            (X86, "e1000_probe")])
def test_panic_and_faulting_function(text, function):
    d = diagnose(text)
    assert d.kind == "panic" and d.function == function
    assert d.line.startswith("Kernel panic - not syncing: ")
    assert f"the kernel panicked in {function}: Kernel panic" in d.sentence()


@pytest.mark.parametrize("code, says", [("0x00000004", "/init died of SIGILL: its programs were built for a CPU"),
                                        ("0x0000000b", "/init died of SIGSEGV"),
                                        ("0x00000100", "/init exited with status 1")])
def test_init_death_is_decoded(code, says):
    d = diagnose(SIGILL_INIT.replace("0x00000004", code))
    assert says in d.sentence() and d.function is None


def test_no_panic_no_diagnosis_and_what_a_stall_says():
    assert diagnose("[ 0.1] Booting Linux\n[ 0.2] Run /init as init process\n") is None
    stall = explain_stop("[ 0.1] Booting Linux\n\x1b[0m[ 9.9] mmc0: timeout waiting for hardware interrupt\r\n")
    assert stall.kind == "stalled" and stall.line == "[ 9.9] mmc0: timeout waiting for hardware interrupt"
    silent = explain_stop("")
    assert silent.kind == "silent" and "serial console stayed empty" in silent.sentence()


def test_the_first_fault_is_named_when_several_follow():
    text = ARM32 + "[    1.4] PC is at panic+0x10/0x20\n"
    assert diagnose(text).function == "bcm2835_power_probe"


GOLDEN = Path(__file__).parents[2] / "golden" / "console"


def test_real_raspi0_console_without_the_power_quirk():
    """A real console: the pi1 kernel (Debian 7.3, bcm2835_defconfig + RT) on
    QEMU 10's raspi0 without initcall_blacklist=bcm2835_power_driver_init."""
    d = diagnose((GOLDEN / "raspi0-pi1-7.3-no-power-quirk.log").read_text())
    assert (d.kind, d.function) == ("panic", "bcm2835_power_probe")
    assert d.line == "Kernel panic - not syncing: Fatal exception"


def test_real_raspi0_console_with_armv7_init():
    """The same kernel with an armv7l /init: the ARM1176 cannot run it."""
    d = diagnose((GOLDEN / "raspi0-pi1-7.3-armv7-init.log").read_text())
    assert d.kind == "panic" and "exitcode=0x00000004" in d.line
    assert "/init died of SIGILL" in d.sentence()


# What a boot test's console showed on 2026-11-28: an RT kernel printed the
# refusal's reason from its printk thread inside /init's line.
INTERLEAVED = (
    "RTFORGE-INSMOD rtforge_hello.ko 8 Exec format errorrtforge_hello: version magic "
    "'6.12.117-rt-rtforge SMP preempt    mod_unload modversions aarch64' should be "
    "'6.12.117-rt-rtforge SMP preempt_rt mod_unload modversions aarch64'\r\n"
    "RTFORGE-INSMOD other.ko 0 loaded\r\n"
)


def test_a_module_error_is_named_from_its_number_whatever_the_kernel_printed_inside():
    assert module_results(INTERLEAVED) == {"rtforge_hello.ko": "Exec format error", "other.ko": "loaded"}
    assert module_results("RTFORGE-INSMOD a.ko 2 No such file or directory\n") == {"a.ko": "No such file or directory"}
