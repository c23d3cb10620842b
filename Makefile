# rtforge: the two commands a newcomer needs are `make run` and `make test`.
# Both run `setup` first, which is idempotent: it installs missing Debian
# packages (when root), creates .venv and installs rtforge with its test extras.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.rtforge-installed

# Debian packages the product and its tests use, grouped by why.
DEBS_BASE    := python3 python3-venv gcc make libc6-dev procps util-linux coreutils
DEBS_MEASURE := rt-tests stress-ng iputils-ping
DEBS_CROSS   := qemu-user-static gcc-aarch64-linux-gnu libc6-dev-arm64-cross \
                gcc-arm-linux-gnueabihf libc6-dev-armhf-cross
DEBS_REPORT  := chromium
DEBS_KERNEL  := git patch xz-utils bc bison flex libssl-dev libelf-dev kmod cpio rsync dpkg-dev ccache \
                linux-source-6.12 linux-source-6.1 qemu-system-arm
DEBS_TARGET  := openssh-server openssh-client sudo busybox \
                qemu-system-x86 qemu-utils debootstrap fdisk e2fsprogs
DEBS := $(DEBS_BASE) $(DEBS_MEASURE) $(DEBS_CROSS) $(DEBS_REPORT) $(DEBS_KERNEL) $(DEBS_TARGET)

.PHONY: setup debs run test bench clean

setup: debs $(STAMP)

debs:
	@scripts/ensure-debs $(DEBS)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	@touch $@

# A 60 s latency test of this machine under CPU, disk and network load,
# then the report with a verdict for a 1 ms cycle.
run: setup
	$(BIN)/rtforge latency --duration 60s --load cpu,io,net --label "make run"
	$(BIN)/rtforge report last --cycle-time 1ms --output report.html

test: setup
	$(BIN)/pytest

bench: setup
	$(BIN)/python bench/probe_vs_cyclictest.py
	$(BIN)/python bench/report_speed.py

clean:
	rm -rf $(VENV) .cache .pytest_cache .hypothesis src/*.egg-info
