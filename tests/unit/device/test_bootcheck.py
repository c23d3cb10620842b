"""`rtforge bootcheck`: which kernel, dtb, initramfs and cmdline a Pi boots.

The Raspberry Pi firmware is closed, so here — and only here — it is
*simulated*: by rtforge's own firmware model (rtforge.device.firmware.bootcfg), run
against real boot-partition trees written to temporary directories.  The
expected values below are written out from the Raspberry Pi documentation
(config.txt: conditional filters, boot options; EEPROM boot flow: tryboot),
not derived from the model's tables, so a wrong table fails a test.
"""

from __future__ import annotations

import gzip

import pytest

from rtforge.device.firmware.bootcfg import DirFiles, OverlayFiles, check, resolve, resolve_text
from rtforge.device.firmware.pimodels import pi_models
from rtforge.errors import UserError

from ...support.bootfiles import CMDLINE, DTBS, PIOS_CONFIG, arm64_image, warned, write, zimage

# Documented defaults (Boot options: kernel, arm_64bit) and the device trees
# the firmware picks (raspberrypi/linux dts names).
DEFAULTS = {
    "pi0": ("kernel.img", "bcm2708-rpi-zero.dtb"),
    "pi0w": ("kernel.img", "bcm2708-rpi-zero-w.dtb"),
    "pi02": ("kernel7.img", "bcm2710-rpi-zero-2-w.dtb"),
    "pi1": ("kernel.img", "bcm2708-rpi-b-plus.dtb"),
    "cm1": ("kernel.img", "bcm2708-rpi-cm.dtb"),
    "pi2": ("kernel7.img", "bcm2709-rpi-2-b.dtb"),
    "pi3": ("kernel7.img", "bcm2710-rpi-3-b.dtb"),
    "pi3+": ("kernel7.img", "bcm2710-rpi-3-b-plus.dtb"),
    "cm3": ("kernel7.img", "bcm2710-rpi-cm3.dtb"),
    "cm3+": ("kernel7.img", "bcm2710-rpi-cm3.dtb"),     # no CM3+ device tree of its own
    "pi4": ("kernel8.img", "bcm2711-rpi-4-b.dtb"),
    "pi400": ("kernel8.img", "bcm2711-rpi-400.dtb"),
    "cm4": ("kernel8.img", "bcm2711-rpi-cm4.dtb"),
    "cm4s": ("kernel8.img", "bcm2711-rpi-cm4s.dtb"),
    "pi5": ("kernel_2712.img", "bcm2712-rpi-5-b.dtb"),
    "pi500": ("kernel_2712.img", "bcm2712-rpi-500.dtb"),
    "cm5": ("kernel_2712.img", "bcm2712-rpi-cm5-cm5io.dtb"),
}
# Conditional filters, model filter table: which filters each board passes.
PASSES = {
    "pi0": {"pi0"}, "pi0w": {"pi0", "pi0w"}, "pi02": {"pi0", "pi0w", "pi02"}, "pi1": {"pi1"}, "cm1": {"pi1", "cm1"},
    "pi2": {"pi2"},
    "pi3": {"pi3"}, "pi3+": {"pi3", "pi3+"}, "cm3": {"pi3", "cm3"}, "cm3+": {"pi3", "pi3+", "cm3+"},
    "pi4": {"pi4"}, "pi400": {"pi4", "pi400"}, "cm4": {"pi4", "cm4"}, "cm4s": {"pi4", "cm4s"},
    "pi5": {"pi5"}, "pi500": {"pi5", "pi500"}, "cm5": {"pi5", "cm5"},
}
ALL_FILTERS = sorted({"pi1", "pi2", "pi3", "pi3+", "pi4", "pi5", "pi400", "pi500", "pi0", "pi0w", "pi02",
                      "cm0", "cm1", "cm3", "cm3+", "cm4", "cm4s", "cm5"})
# --- models: defaults and filters ------------------------------------------

def test_every_documented_model_is_offered_and_nothing_else():
    assert set(pi_models()) == set(DEFAULTS)
    assert sorted(DTBS) == sorted({dtb for _, dtb in DEFAULTS.values()})  # the test partitions hold them all


@pytest.mark.parametrize("model", sorted(DEFAULTS))
def test_default_kernel_dtb_initramfs_cmdline_per_model(pios, model):
    kernel, dtb = DEFAULTS[model]
    c = resolve(pios, model)
    assert (c.kernel, c.dtb, c.cmdline, c.cmdline_file) == (kernel, dtb, CMDLINE, "cmdline.txt")
    # auto_initramfs: the initramfs named after the chosen standard kernel.
    assert c.initramfs == kernel.replace("kernel", "initramfs").removesuffix(".img")
    assert c.warnings == [] and c.reasons["kernel"].startswith(f"default for a {model}")


@pytest.mark.parametrize("model", sorted(DEFAULTS))
@pytest.mark.parametrize("filt", ALL_FILTERS)
def test_model_filter_table(pios, model, filt):
    (pios / "config.txt").write_text(f"[{filt}]\nkernel=k-{filt}.img\n[all]\n")
    (pios / f"k-{filt}.img").write_bytes(b"")
    assert (resolve(pios, model).kernel == f"k-{filt}.img") == (filt in PASSES[model])


@pytest.mark.parametrize("model,arm64,kernel", [
    ("pi3", "1", "kernel8.img"), ("pi3+", "1", "kernel8.img"), ("cm3", "1", "kernel8.img"),
    ("pi02", "1", "kernel8.img"), ("pi4", "0", "kernel7l.img"), ("pi400", "0", "kernel7l.img"),
    ("cm4", "0", "kernel7l.img"), ("pi3", "0", "kernel7.img"), ("pi4", "1", "kernel8.img"),
])
def test_arm_64bit_selects_the_default_kernel(pios, model, arm64, kernel):
    (pios / "config.txt").write_text(f"arm_64bit={arm64}\n")
    c = resolve(pios, model)
    assert c.kernel == kernel and c.arm_64bit == (arm64 == "1") and c.warnings == []
    assert f"arm_64bit={arm64} (config.txt:1)" in c.reasons["arm_64bit"]


def test_pi5_falls_back_to_kernel8_when_kernel_2712_is_absent(pios):
    (pios / "kernel_2712.img").unlink()
    c = resolve(pios, "pi5")
    assert c.kernel == "kernel8.img" and c.initramfs == "initramfs8" and c.warnings == []
    assert "kernel_2712.img is missing" in c.reasons["kernel"]


def test_filters_are_cumulative_until_another_model_filter_or_all(pios):
    write(
        pios,
        {
            "a.img": b"",
            "b.img": b"",
            "c.img": b"",
            "config.txt": "[pi4]\nkernel=a.img\ndtparam=x\n\n# still [pi4]\nkernel=b.img\n[pi400]\nkernel=c.img\n",
        },
    )
    assert resolve(pios, "pi4").kernel == "b.img"  # [pi400] replaced [pi4]: a Pi 4B stops reading
    assert resolve(pios, "pi400").kernel == "c.img"  # a Pi 400 passes both; the last line wins
    assert resolve(pios, "cm4").kernel == "b.img"  # a CM4 passes [pi4], not [pi400]
    assert resolve(pios, "pi5").kernel == "kernel_2712.img"


def test_reason_names_file_line_and_section(pios):
    write(pios, {"kernel8-rt.img": arm64_image(), "config.txt": PIOS_CONFIG + "[pi4]\nkernel=kernel8-rt.img\n"})
    c = resolve(pios, "pi4")
    assert c.kernel == "kernel8-rt.img"
    assert c.reasons["kernel"] == "kernel=kernel8-rt.img (config.txt:21, in [pi4])"


def test_filters_of_different_types_combine(pios):
    write(
        pios,
        {"t.img": b"", "config.txt": "[pi4]\n[tryboot]\nkernel=t.img\n[all]\n", "tryboot.txt": "include config.txt\n"},
    )
    assert resolve(pios, "pi4").kernel == "kernel8.img"  # not a tryboot
    assert resolve(pios, "pi4", tryboot=True).kernel == "t.img"  # [pi4] and [tryboot]
    assert resolve(pios, "pi5", tryboot=True).kernel == "kernel_2712.img"


def test_all_resets_every_filter(pios):
    write(pios, {"x.img": b"", "config.txt": "[pi5]\n[gpio4=1]\n[all]\nkernel=x.img\n"})
    assert resolve(pios, "pi4").kernel == "x.img"


def test_none_blocks_until_all(pios):
    write(pios, {"x.img": b"", "config.txt": "[none]\nkernel=x.img\n[all]\narm_64bit=0\n"})
    c = resolve(pios, "pi4")
    assert c.kernel == "kernel7l.img" and c.warnings == []


def test_none_followed_by_a_model_filter_is_flagged_as_undocumented(pios):
    write(pios, {"x.img": b"", "config.txt": "[none]\n[pi4]\nkernel=x.img\n"})
    c = resolve(pios, "pi4")
    assert c.kernel == "kernel8.img"
    assert warned(c, "config.txt:3", "follows [none]", "put [all] before it")


def test_board_type_filter(pios):
    write(pios, {"x.img": b"", "config.txt": "[board-type=0x11]\nkernel=x.img\n"})
    assert resolve(pios, "pi4").kernel == "x.img"
    assert resolve(pios, "pi400").kernel == "kernel8.img"  # a Pi 400 is type 0x13


def test_filter_bootcheck_cannot_evaluate_is_flagged(pios):
    write(pios, {"x.img": b"", "config.txt": "[gpio4=1]\nkernel=x.img\n[all]\n"})
    c = resolve(pios, "pi4")
    assert c.kernel == "kernel8.img"
    assert warned(c, "config.txt:2", "[gpio4=1]", "depends on the board at boot time")


@pytest.mark.parametrize("section", ["[Pi4]", "[pi6]"])
def test_undocumented_filter_name(pios, section):
    write(pios, {"x.img": b"", "config.txt": f"{section}\nkernel=x.img\n[all]\n"})
    c = resolve(pios, "pi4")
    assert c.kernel == "kernel8.img" and len(c.warnings) == 1
    assert warned(c, f"config.txt:1: {section} is not a documented filter", "fix the filter name")
    assert warned(c, "[pi4]") == (section == "[Pi4]")


# --- tryboot ----------------------------------------------------------------


def test_tryboot_reads_tryboot_txt_instead_of_config_txt(pios):
    write(
        pios,
        {
            "rt/kernel8.img": arm64_image(),
            "rt/bcm2711-rpi-4-b.dtb": b"dtb",
            "rt/cmdline.txt": CMDLINE + " rt",
            "rt/overlays/README": "x",
            "tryboot.txt": PIOS_CONFIG + "os_prefix=rt/\n",
        },
    )
    normal, tried = resolve(pios, "pi4"), resolve(pios, "pi4", tryboot=True)
    assert (normal.config, normal.kernel, normal.cmdline) == ("config.txt", "kernel8.img", CMDLINE)
    assert (tried.config, tried.kernel, tried.dtb) == ("tryboot.txt", "rt/kernel8.img", "rt/bcm2711-rpi-4-b.dtb")
    assert (tried.initramfs, tried.cmdline, tried.warnings) == (None, CMDLINE + " rt", [])


def test_missing_tryboot_txt_is_flagged(pios):
    c = resolve(pios, "pi4", tryboot=True)
    assert c.kernel == "kernel8.img"
    assert warned(c, "tryboot.txt is missing", "write tryboot.txt")


def test_tryboot_section_in_config_txt_is_never_read_in_tryboot_mode(pios):
    write(
        pios,
        {
            "kernel8-rt.img": arm64_image(),
            "tryboot.txt": "auto_initramfs=1\n",
            "config.txt": PIOS_CONFIG + "[tryboot]\nkernel=kernel8-rt.img\n[all]\n",
        },
    )
    assert resolve(pios, "pi4").kernel == "kernel8.img"
    c = resolve(pios, "pi4", tryboot=True)
    assert c.kernel == "kernel8.img"
    assert warned(c, "config.txt:21", "kernel=kernel8-rt.img", "put the line in tryboot.txt")


def test_tryboot_section_in_tryboot_txt_applies(pios):
    write(pios, {"kernel8-rt.img": arm64_image(), "tryboot.txt": "[all]\n[tryboot]\nkernel=kernel8-rt.img\n"})
    c = resolve(pios, "pi4", tryboot=True)
    assert c.kernel == "kernel8-rt.img" and c.warnings == []


def test_resolve_text_checks_a_tryboot_txt_before_it_is_written(pios):
    write(
        pios,
        {
            "rt/kernel8.img": arm64_image(),
            "rt/bcm2711-rpi-4-b.dtb": b"dtb",
            "rt/cmdline.txt": CMDLINE,
            "rt/overlays/README": "x",
        },
    )
    before = sorted(p.name for p in pios.iterdir())
    c = resolve_text(PIOS_CONFIG + "[pi4]\nos_prefix=rt/\n[all]\n", pios, "pi4", tryboot=True)
    assert c.kernel == "rt/kernel8.img" and c.warnings == []
    assert sorted(p.name for p in pios.iterdir()) == before  # nothing written
    bad = resolve_text(PIOS_CONFIG + "[pi5]\nos_prefix=rt/\n[all]\n", pios, "pi4", tryboot=True)
    assert bad.kernel == "kernel8.img" and warned(bad, "os_prefix=rt/ is under [pi5]")


def test_any_boot_files_object_works_without_a_directory():
    class Card:  # what deploy passes for a partition it reads over SSH
        files = {
            "config.txt": b"[pi4]\nkernel=k.img\n",
            "k.img": arm64_image(),
            "bcm2711-rpi-4-b.dtb": b"d",
            "cmdline.txt": b"root=/dev/sda2\n",
        }

        def read(self, name, limit=None):
            data = self.files.get(name)
            return None if data is None else data[:limit]

        def exists(self, name):
            return name in self.files

    c = resolve(Card(), "cm4")
    assert (c.kernel, c.dtb, c.cmdline) == ("k.img", "bcm2711-rpi-cm4.dtb", "root=/dev/sda2")
    assert warned(c, "bcm2711-rpi-cm4.dtb is not on the boot partition")
    removed = resolve(OverlayFiles(Card(), {"k.img": None}), "pi4")
    assert warned(removed, "kernel=k.img (config.txt:2)", "not on the boot partition")


# --- traps --------------------------------------------------------------------


def test_kernel_naming_a_missing_file(pios):
    write(pios, {"config.txt": "kernel=kernel8-rt.img\n"})
    c = resolve(pios, "pi4")
    assert c.kernel == "kernel8-rt.img"
    assert warned(c, "kernel=kernel8-rt.img (config.txt:1)", "not on the boot partition", "would not boot")


def test_kernel_outside_the_partition(pios):
    write(pios, {"config.txt": "kernel=../../etc/passwd\n"})
    c = resolve(pios, "pi4")
    assert c.kernel is None and warned(c, "outside the boot partition")


def test_missing_default_kernel_and_dtb(tmp_path):
    write(tmp_path, {"config.txt": "", "cmdline.txt": CMDLINE})
    c = resolve(tmp_path, "pi3")
    assert (c.kernel, c.dtb) == ("kernel7.img", "bcm2710-rpi-3-b.dtb")
    assert warned(c, "default kernel for a pi3 is kernel7.img") and warned(c, "bcm2710-rpi-3-b.dtb is not on")


@pytest.mark.parametrize("model", ["pi4", "pi3", "pi5", "cm5"])
def test_rt_kernel_under_a_section_the_model_does_not_read(pios, model):
    write(
        pios,
        {
            "kernel8-rt.img": arm64_image(),
            "config.txt": PIOS_CONFIG + "arm_64bit=1\n[pi5]\nkernel=kernel8-rt.img\n[all]\n",
        },
    )
    c = resolve(pios, model)
    misses = model not in ("pi5", "cm5")
    assert (c.kernel == "kernel8-rt.img") != misses
    assert (
        warned(
            c,
            "config.txt:22: kernel=kernel8-rt.img is under [pi5]",
            f"which a {model} does not read",
            f"move the line under [{model}] or [all]",
        )
        == misses
    )


def test_installed_kernel_under_another_models_section(pios):
    write(pios, {"vmlinuz-6.12": arm64_image(), "config.txt": "[cm4]\nkernel=vmlinuz-6.12\n"})
    c = resolve(pios, "pi4")
    assert c.kernel == "kernel8.img" and warned(c, "kernel=vmlinuz-6.12 is under [cm4]")
    assert resolve(pios, "cm4").warnings == []


@pytest.mark.parametrize(
    "model,config,kernel,fix",
    [
        ("pi4", "kernel=kernel7l-rt.img\n", "kernel7l-rt.img", "set arm_64bit=0"),  # default 64-bit mode
        ("pi3", "arm_64bit=1\nkernel=zImage\n", "zImage", "set arm_64bit=0"),
        ("pi4", "arm_64bit=1\nkernel=kernel7l.img\n", "kernel7l.img", "set arm_64bit=0"),
        ("pi5", "kernel=kernel7l.img\n", "kernel7l.img", "choose kernel_2712.img"),
    ],
)
def test_32bit_kernel_started_in_64bit_mode(pios, model, config, kernel, fix):
    write(pios, {"kernel7l-rt.img": zimage(), "zImage": zimage(), "config.txt": config})
    c = resolve(pios, model)
    assert c.kernel == kernel and c.arm_64bit
    assert warned(c, f"{kernel} is a 32-bit kernel", "64-bit mode", fix)


def test_64bit_kernel_without_arm_64bit(pios):
    write(pios, {"kernel8-rt.img": arm64_image(), "config.txt": "kernel=kernel8-rt.img\n"})
    c = resolve(pios, "pi3")
    assert c.kernel == "kernel8-rt.img" and not c.arm_64bit
    assert warned(c, "kernel8-rt.img is a 64-bit kernel (by its header)", "add arm_64bit=1")
    (pios / "config.txt").write_text("kernel=kernel8-rt.img\narm_64bit=1\n")
    assert resolve(pios, "pi3").warnings == []


def test_known_kernel_name_sets_arm_64bit(pios):
    write(pios, {"config.txt": "kernel=kernel8.img\n"})
    c = resolve(pios, "pi3")
    assert c.arm_64bit and c.warnings == [] and "known name kernel8.img" in c.reasons["arm_64bit"]


def test_kernel_header_wins_over_its_name(pios):
    # A gzipped arm64 Image named like a 32-bit kernel: the header decides.
    write(pios, {"kernel7-custom.img": gzip.compress(arm64_image()), "config.txt": "kernel=kernel7-custom.img\n"})
    c = resolve(pios, "pi4")
    assert c.warnings == []
    write(pios, {"kernel7-custom.img": b"no header here"})
    assert warned(resolve(pios, "pi4"), "kernel7-custom.img is a 32-bit kernel (by its name)")


def test_arm_64bit_where_it_cannot_apply(pios):
    write(pios, {"config.txt": "arm_64bit=0\n"})
    c = resolve(pios, "pi5")
    assert c.kernel == "kernel_2712.img" and c.arm_64bit and warned(c, "arm_64bit=0 has no effect on a pi5")
    write(pios, {"config.txt": "arm_64bit=1\n"})
    c = resolve(pios, "pi0")
    assert c.kernel == "kernel.img" and not c.arm_64bit
    assert c.warnings == ["config.txt:1: a pi0 cannot run a 64-bit kernel; remove arm_64bit=1."]
    write(pios, {"config.txt": "arm_64bit=yes\n"})
    assert warned(resolve(pios, "pi4"), "arm_64bit=yes is not a number")


# --- check() and the CLI ----------------------------------------------------------


def test_check_returns_normal_and_tryboot(pios):
    out = check(pios, "pi4")
    assert set(out) == {"normal", "tryboot"}
    assert set(out["normal"]) == {"kernel", "dtb", "initramfs", "cmdline", "overlays", "warnings"}
    assert out["normal"]["kernel"] == "kernel8.img"


def test_check_refuses_bad_input(tmp_path):
    with pytest.raises(UserError, match="no config.txt"):
        check(tmp_path, "pi4")
    with pytest.raises(UserError, match="use one of pi0, pi0w, pi02"):
        check(tmp_path, "pi6")
    with pytest.raises(UserError, match="not a directory"):
        resolve(tmp_path / "nope", "pi4")


def test_dirfiles_stays_inside_the_partition(tmp_path):
    (tmp_path / "boot").mkdir()
    (tmp_path / "secret").write_text("x")
    (tmp_path / "boot" / "link").symlink_to(tmp_path / "secret")
    files = DirFiles(tmp_path / "boot")
    assert files.read("../secret") is None and not files.exists("link") and files.read("/") is None


@pytest.mark.parametrize("content, warns", [
    (b"", False),                                     # unreadable as either (an empty or unknown image)
    (gzip.compress(b"\x1f" + b"\x00" * 500, mtime=0), False),  # a gzip stream that holds no arm64 Image header
    ("arm64", False),                                 # a gzipped arm64 Image
    ("zimage", True),                                 # a real zImage: its header proves it 32-bit
])
def test_kernel_img_with_arm_64bit_is_judged_by_its_header_not_its_name(pios, content, warns):
    """Distributions boot 64-bit kernels named kernel.img with arm_64bit=1: the
    name 'kernel.img' alone is no reason to warn '32-bit kernel'."""
    data = {"arm64": lambda: gzip.compress(arm64_image()), "zimage": zimage}.get(content, lambda: content)()
    write(pios, {"kernel.img": data, "config.txt": "arm_64bit=1\nkernel=kernel.img\n"})
    c = resolve(pios, "pi4")
    assert c.kernel == "kernel.img" and c.arm_64bit
    assert any("is a 32-bit kernel" in w for w in c.warnings) == warns, c.warnings
    if warns:
        assert warned(c, "kernel.img is a 32-bit kernel (by its header)")
