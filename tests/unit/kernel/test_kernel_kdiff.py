"""Why an option differs from the running kernel's, read from Kconfig: each
rule on a small Kconfig tree written here (the rules' cases side by side),
then on Debian's real 6.12 tree for what PREEMPT_RT does to arm64's
defconfig (test_kernel_match_build.py checks a whole build)."""

from __future__ import annotations

import pytest

from rtforge.kernel.kdiff import differences, report_lines, roots

KCONFIG = """\
mainmenu "test"

config EXPERT
	bool "Configure standard kernel features (expert users)"
	select DEBUG_KERNEL

config DEBUG_KERNEL
	bool "Kernel debugging"

config ARCH_SUPPORTS_RT
	def_bool y

choice
	prompt "Preemption Model"
	default PREEMPT_NONE

config PREEMPT_NONE
	bool "No Forced Preemption (Server)"

config PREEMPT_RT
	bool "Fully Preemptible Kernel (Real-Time)"
	depends on EXPERT && ARCH_SUPPORTS_RT
	select PREEMPTION

endchoice

config PREEMPTION
	bool

config TRANSPARENT_HUGEPAGE
	bool "Transparent Hugepage Support"
	depends on !PREEMPT_RT
	help
		This depends on !PREEMPT_RT in the help text too, which is not a dependency.

config RCU_BOOST
	bool "Enable RCU priority boosting" if RCU_EXPERT
	default y if PREEMPT_RT

config RCU_BOOST_DELAY
	int "Milliseconds to delay boosting"
	depends on RCU_BOOST
	default 500

config ARCH_INLINE_SPIN_LOCK
	bool

config ARM64
	def_bool y
	select ARCH_INLINE_SPIN_LOCK if !PREEMPTION

config SOFTIRQ_ON_OWN_STACK
	def_bool ARM64 && !PREEMPT_RT

config CC_VERSION_TEXT
	string
	default "$(CC_VERSION_TEXT)"

config SHOWN_BY_EXPERT
	bool "Only visible with EXPERT" if EXPERT
"""

RUNNING = {"ARCH_SUPPORTS_RT": "y", "PREEMPT_NONE": "y", "TRANSPARENT_HUGEPAGE": "y", "ARM64": "y",
           "ARCH_INLINE_SPIN_LOCK": "y", "SOFTIRQ_ON_OWN_STACK": "y", "CC_VERSION_TEXT": '"gcc (Raspbian) 12.2"',
           "OLD_DRIVER": "m"}
BUILT = {"EXPERT": "y", "DEBUG_KERNEL": "y", "ARCH_SUPPORTS_RT": "y", "PREEMPT_NONE": "n", "PREEMPT_RT": "y",
         "PREEMPTION": "y", "RCU_BOOST": "y", "RCU_BOOST_DELAY": "500", "ARM64": "y",
         "CC_VERSION_TEXT": '"aarch64-linux-gnu-gcc (Debian 12.2.0-14) 12.2.0"', "SHOWN_BY_EXPERT": "n",
         "SOFTIRQ_ON_OWN_STACK": "n"}


def test_every_rule_names_its_cause(tmp_path):
    (tmp_path / "Kconfig").write_text(KCONFIG)
    got = {c.symbol: (c.old, c.new, c.kind, c.why) for c in
           differences(RUNNING, BUILT, tmp_path, "arm64", {"EXPERT": "rt", "PREEMPT_RT": "rt"})}
    assert got == {
        "EXPERT": ("n", "y", "asked", "asked for (rt)"),
        "PREEMPT_RT": ("n", "y", "asked", "asked for (rt)"),
        "DEBUG_KERNEL": ("n", "y", "follows", "selected by EXPERT: EXPERT is now y"),
        "PREEMPT_NONE": ("y", "n", "follows", "one choice with PREEMPT_RT (the `choice` in Kconfig), which is now y"),
        "PREEMPTION": ("n", "y", "follows", "selected by PREEMPT_RT: PREEMPT_RT is now y"),
        "TRANSPARENT_HUGEPAGE": ("y", "n", "follows", "depends on !PREEMPT_RT: PREEMPT_RT is now y"),
        "RCU_BOOST": ("n", "y", "follows", "default y if PREEMPT_RT: PREEMPT_RT is now y"),
        "RCU_BOOST_DELAY": ("(unset)", "500", "follows", "depends on RCU_BOOST: RCU_BOOST is now y"),
        "ARCH_INLINE_SPIN_LOCK": ("y", "n", "follows",
                                  "no longer selected by ARM64 (if !PREEMPTION): PREEMPTION is now y"),
        "SOFTIRQ_ON_OWN_STACK": ("y", "n", "follows", "default ARM64 && !PREEMPT_RT: PREEMPT_RT is now y"),
        "CC_VERSION_TEXT": ('"gcc (Raspbian) 12.2"', '"aarch64-linux-gnu-gcc (Debian 12.2.0-14) 12.2.0"', "toolchain",
                            'Kconfig measures it from this machine\'s toolchain ("$(CC_VERSION_TEXT)")'),
        "OLD_DRIVER": ("m", "n", "source", "this source has no such option (the running kernel's source had it)"),
    }
    # "# CONFIG_SHOWN_BY_EXPERT is not set" where the running .config had no line: n both times, no change


def test_chains_lead_back_to_what_was_asked(tmp_path):
    (tmp_path / "Kconfig").write_text(KCONFIG)
    changes = differences(RUNNING, BUILT, tmp_path, "arm64", {"EXPERT": "rt", "PREEMPT_RT": "rt"})
    origin = roots(changes)
    assert origin["ARCH_INLINE_SPIN_LOCK"] == {"PREEMPT_RT"}        # via PREEMPTION
    assert origin["RCU_BOOST_DELAY"] == {"PREEMPT_RT"}              # via RCU_BOOST
    assert origin["DEBUG_KERNEL"] == {"EXPERT"}
    lines = report_lines(changes)
    assert lines[0] == "asked for by this build (2):"
    assert ("  CONFIG_RCU_BOOST_DELAY (unset) -> 500: depends on RCU_BOOST: RCU_BOOST is now y  [from PREEMPT_RT]"
            in lines)
    assert "measured from this machine's compiler (1):" in lines
    assert "differ because the source differs from the running kernel's (1):" in lines


@pytest.mark.slow
def test_real_tree_rt_on_arm64_defconfig(src612, tmp_path):
    """What PREEMPT_RT and EXPERT change in Debian's 6.12 arm64 defconfig,
    explained from its real Kconfig files; both .configs are Kbuild's own
    (defconfig, then olddefconfig with the two options: ~20 s)."""
    import subprocess

    from rtforge.kernel.kconfig import read_config

    tree = src612.path
    a, b = tmp_path / "a", tmp_path / "b"
    make = ["make", "-s", "-C", str(tree), "ARCH=arm64", "CROSS_COMPILE=aarch64-linux-gnu-"]
    subprocess.run([*make, f"O={a}", "defconfig"], check=True, capture_output=True)
    b.mkdir()
    (b / ".config").write_text((a / ".config").read_text() + "CONFIG_EXPERT=y\nCONFIG_PREEMPT_RT=y\n")
    subprocess.run([*make, f"O={b}", "olddefconfig"], check=True, capture_output=True)
    changes = {c.symbol: c for c in differences(read_config(a / ".config"), read_config(b / ".config"), tree,
                                                "arm64", {"EXPERT": "rt", "PREEMPT_RT": "rt"})}
    # every explanation quotes a line Kconfig really has
    assert changes["PREEMPT"].why == ("one choice with PREEMPT_RT (the `choice` in kernel/Kconfig.preempt), "
                                      "which is now y")
    thp = changes["TRANSPARENT_HUGEPAGE"].why
    assert thp.startswith("depends on ") and thp.endswith("!PREEMPT_RT: PREEMPT_RT is now y")
    assert thp.removeprefix("depends on ").split(":")[0] in (tree / "mm/Kconfig").read_text()
    assert not [c for c in changes.values() if c.kind == "kconfig"], "every difference is explained"
