"""The Pi model table as data (rtforge/data/pi_models.toml, device/firmware/pimodels.py).

Expected values are written out from the Raspberry Pi documentation and the
strings real boards put in /proc/device-tree/model, not from the table."""

from __future__ import annotations

import pytest

from rtforge.device.firmware import pimodels
from rtforge.device.firmware.pimodels import model_for_dt, pi_model, pi_models, soc_kernel
from rtforge.errors import UserError

# /proc/device-tree/model as real boards report it -> the model
DT_MODELS = {
    "Raspberry Pi Model B Rev 2": "pi1",
    "Raspberry Pi Model B Plus Rev 1.2": "pi1",
    "Raspberry Pi Compute Module Rev 1.0": "cm1",
    "Raspberry Pi Compute Module IO board rev1": "cm1",   # mainline's bcm2835-rpi-cm1-io1.dts
    "Raspberry Pi Zero Rev 1.3": "pi0",
    "Raspberry Pi Zero W Rev 1.1": "pi0w",
    "Raspberry Pi Zero 2 W Rev 1.0": "pi02",
    "Raspberry Pi 2 Model B Rev 1.1": "pi2",
    "Raspberry Pi 2 Model B Rev 1.2": "pi2",
    "Raspberry Pi 3 Model B Rev 1.2": "pi3",
    "Raspberry Pi 3 Model B Plus Rev 1.3": "pi3+",
    "Raspberry Pi 3 Model A Plus Rev 1.0": "pi3+",
    "Raspberry Pi Compute Module 3 Rev 1.0": "cm3",
    "Raspberry Pi Compute Module 3 IO board V3.0": "cm3",   # mainline's bcm2837-rpi-cm3-io3.dts
    "Raspberry Pi Compute Module 3 Plus Rev 1.0": "cm3+",
    "Raspberry Pi 4 Model B Rev 1.4": "pi4",
    "Raspberry Pi 400 Rev 1.0": "pi400",
    "Raspberry Pi Compute Module 4 Rev 1.0": "cm4",
    "Raspberry Pi Compute Module 4S Rev 1.0": "cm4s",
    "Raspberry Pi 5 Model B Rev 1.0": "pi5",
    "Raspberry Pi 500 Rev 1.0": "pi500",
    "Raspberry Pi Compute Module 5 Rev 1.0": "cm5",
}


@pytest.mark.parametrize("dt, name", sorted(DT_MODELS.items()))
def test_device_tree_model_names_the_model(dt, name):
    assert model_for_dt(dt + "\0").name == name


def test_unknown_boards_are_one_sentence():
    # the CM0 (raspberrypi/linux bcm2710-rpi-cm0.dts) is not modelled: refused, not taken for a CM1
    for dt in (None, "", "QEMU Virt Machine", "Raspberry", "Raspberry Pi Compute Module 0 Rev 1.0"):
        with pytest.raises(UserError, match="is not a Raspberry Pi model rtforge knows"):
            model_for_dt(dt)
    with pytest.raises(UserError, match="unknown model 'pi6': use one of pi0, "):
        pi_model("pi6")


def test_64bit_facts_from_the_documentation():
    # Boot options, arm_64bit note: 3, 3+, 4, 400, Zero 2 W, 2B rev 1.2, CM3, CM3+, CM4
    runs = {name for name, m in pi_models().items() if m.runs_64bit}
    assert runs == {"pi02", "pi2", "pi3", "pi3+", "cm3", "cm3+", "pi4", "pi400", "cm4", "cm4s", "pi5", "pi500", "cm5"}
    assert pi_model("pi2").arm64 == "bcm2837-revision"
    assert {n for n, m in pi_models().items() if m.arm_64bit_default} == {"pi4", "pi400", "cm4", "cm4s", "pi5",
                                                                          "pi500", "cm5"}
    assert soc_kernel("kernel_2712_rt.img")[0] == ["bcm2712"] and soc_kernel("kernel8_rt.img") is None


def test_a_malformed_table_is_a_bug_not_a_user_error():
    table = {k: v for k, v in pi_model("pi4").to_dict().items() if k != "name"}
    table["kernel32"] = table["kernel32"] or ""
    assert pimodels._check("pi4", table) == pi_model("pi4")  # the table's own shape round-trips
    with pytest.raises(ValueError, match="keys"):
        pimodels._check("pi4", {**table, "typo": 1})
    with pytest.raises(ValueError, match="arm64 must be one of"):
        pimodels._check("pi4", {**table, "arm64": "maybe"})
    with pytest.raises(ValueError, match="must pass its own filter"):
        pimodels._check("pi4", {**table, "filters": ["pi3"]})
    with pytest.raises(ValueError, match="no 32-bit kernel"):
        pimodels._check("pi4", {**table, "kernel32": ""})
    assert pimodels._check("pi4", {**table, "kernel32": "", "arm64": "only"}).kernel32 is None
