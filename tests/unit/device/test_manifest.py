"""One module owns the bundle manifest (device/deploy/manifest.py): the RT
marker, "fits this Pi" and "the booted kernel is this one", asked by the
build, the boot test and deploy alike."""

from __future__ import annotations

from rtforge.device.deploy.manifest import fits, installed, kernel_problems, rt_marker, uname_v_marker
from rtforge.device.firmware.pimodels import pi_models
from rtforge.kernel.boards import load_boards


def test_the_marker_from_a_config_and_from_its_text_agree():
    for config, want in (({"PREEMPT_RT": "y"}, "PREEMPT_RT"), ({"PREEMPT_RT_FULL": "y"}, "RT"),
                         ({"PREEMPT": "y", "PREEMPT_RT": "n"}, None), ({}, None)):
        text = "".join(f"CONFIG_{k}={v}\n" if v != "n" else f"# CONFIG_{k} is not set\n" for k, v in config.items())
        assert rt_marker(config) == uname_v_marker(text) == want
    assert uname_v_marker("# CONFIG_PREEMPT_RT=y\nCONFIG_PREEMPT_RT_BASE=y\n") is None


def test_a_board_and_its_bundle_fit_the_same_pis():
    for board in load_boards().values():
        if not board.pis:
            continue
        for model in pi_models().values():
            for dt in model.dt_models:
                for shown in (dt, f"{dt} Rev 1.4", f"{dt} Rev 1.1\0"):
                    assert board.fits_model(shown) == fits(shown, board.pis), shown
    assert not fits(None, ["pi4"]) and not fits("", (), ["Raspberry Pi 4"]) and not fits("a PC", ["pi4"])
    assert fits("Raspberry Pi 4 Model B Rev 1.4", (), ["Raspberry Pi 4 Model B"])  # an older bundle: by prefix


def test_a_booted_kernel_is_judged_by_one_rule():
    assert kernel_problems("PREEMPT_RT", "#1 SMP PREEMPT_RT Tue", None) == []
    assert kernel_problems("PREEMPT_RT", "#1 SMP PREEMPT_RT Tue", 1, release="6.12", uname_r="6.12") == []
    assert kernel_problems("PREEMPT_RT", "#1 SMP PREEMPT Tue", "0", release="6.12", uname_r="6.6") == [
        "uname -v lacks PREEMPT_RT (#1 SMP PREEMPT Tue)", "/sys/kernel/realtime is 0", "uname -r is 6.6, not 6.12"]


def test_an_installed_kernel_is_named_by_its_manifest():
    assert installed('{"kernelrelease": "6.12.0-rt5", "board": "pi4-64"}') == ("6.12.0-rt5", "pi4-64")
    assert installed('{"kernelrelease": "6.12.0-rt5"}') == ("6.12.0-rt5", "?")
    assert installed("[1]") is None and installed("{") is None and installed("{}") is None


def test_the_old_two_word_marker_and_the_full_option_of_rt_before_5_3():
    old = "#1 SMP PREEMPT RT Fri Jan 1"
    assert kernel_problems("RT", old, 1, config_from="/boot/config-4.19.1-rt3",
                           config_rt=["CONFIG_PREEMPT_RT_FULL=y"]) == []
    assert kernel_problems("PREEMPT_RT", "#1 SMP PREEMPT Fri", None, config_from="/proc/config.gz", config_rt=[]) == [
        "uname -v lacks PREEMPT_RT (#1 SMP PREEMPT Fri)", "its configuration (/proc/config.gz) has no PREEMPT_RT line"]
