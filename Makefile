# rtforge: the two commands a newcomer needs are `make run` and `make test`.
# Both run `setup` first, which is idempotent: it installs missing Debian
# packages (when root), creates .venv and installs rtforge with its test extras.
# `make check` is the fast loop for daily work: the linters, tests/unit (pure
# logic, ~30 s) and tests/integration (sshd, qemu-user, real short runs)
# without the slow ones; tests/e2e (kernel builds, QEMU guests, reboots) and
# every `slow` test run in `make test`.  `make unit` is the tier alone.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.rtforge-installed

# Debian packages the product and its tests use, grouped by why.
# src/rtforge/data/tools.toml names the package of every tool rtforge runs;
# tests/integration/test_tools.py checks that each of those is listed here.
DEBS_BASE    := python3 python3-venv gcc make libc6-dev procps util-linux coreutils git ca-certificates
DEBS_MEASURE := rt-tests stress-ng iputils-ping
# armel (ARMv6: Pi 1, Zero) next to armhf (ARMv7) and arm64: one per Pi CPU
DEBS_CROSS   := gcc-aarch64-linux-gnu libc6-dev-arm64-cross gcc-arm-linux-gnueabihf libc6-dev-armhf-cross \
                gcc-arm-linux-gnueabi libc6-dev-armel-cross
DEBS_REPORT  := chromium
DEBS_KERNEL  := patch xz-utils bc bison flex libssl-dev libelf-dev kmod cpio rsync dpkg-dev debhelper fakeroot ccache \
                pahole lz4 lzop zstd \
                linux-source-6.12 linux-source-6.1
DEBS_TARGET  := openssh-server openssh-client sudo busybox debootstrap fdisk e2fsprogs apt
DEBS_LINT    := shellcheck
# rtforge fleet runs ansible-playbook as a tool (like ssh), so Debian's: Debian 12's 2.14 has every feature the
# collection uses, and its modules run under Ansible's own Python whichever venv rtforge is in
DEBS_FLEET   := ansible-core
# the soak monitor's metrics: the tests run the real node_exporter and Prometheus (promtool is in prometheus);
# systemd: its systemd-analyze judges the monitor's unit (no init runs here)
DEBS_MONITOR := prometheus prometheus-node-exporter systemd
DEBS := $(DEBS_BASE) $(DEBS_MEASURE) $(DEBS_CROSS) $(DEBS_REPORT) $(DEBS_KERNEL) $(DEBS_TARGET) $(DEBS_LINT) \
        $(DEBS_FLEET) $(DEBS_MONITOR)
# QEMU 9 or later emulates every Pi that QEMU has (raspi4b is new in 9.0);
# Debian 12 ships 7.2, bookworm-backports 10.0.  qemu-user runs each Pi's CPU.
# rtla: 6.1 in Debian 12 has no auto-analysis (--aa-only, which --trace uses), 6.12 in backports has.
BACKPORTS      := bookworm-backports
DEBS_BACKPORTS := qemu-system-arm>=1:9 qemu-system-x86>=1:9 qemu-utils>=1:9 qemu-user-static>=1:9 rtla>=6.3

# C programs that run on a board: built by rtforge, linted here
C_PROGRAMS := probe nqueens bootinit
SHELL_SCRIPTS := scripts/ensure-debs .ci/run .ci/cleanroot src/rtforge/data/runner.sh src/rtforge/data/safe.sh

.PHONY: setup debs run test check unit lint bench matrix clean print-debs collection

setup: debs $(STAMP)

debs:
	@scripts/ensure-debs $(DEBS)
	@scripts/ensure-debs --from $(BACKPORTS) $(foreach d,$(DEBS_BACKPORTS),'$(d)')

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

# Everything: the linters, then every test (kernel builds and QEMU guests included),
# on every core (pytest-xdist): tests that share a kernel build, a guest or this
# machine as the board run one after the other on one worker (their groups:
# tests/support/budget.py), the rest side by side; then the `machine` tests alone.
# --durations and the budget section: every CI log names the slowest tests and
# the time per tier, so the time budget (docs/testing.md) is watched with figures.
# RTFORGE_HYPOTHESIS=fixed: the same Hypothesis examples every run (tests/conftest.py says why).
test: setup lint
	RTFORGE_HYPOTHESIS=fixed $(BIN)/pytest -n auto --dist loadgroup --durations=20 -m "not machine"
	RTFORGE_HYPOTHESIS=fixed $(BIN)/pytest --durations=5 -m machine

# The fast loop: linters and the tests that neither build a kernel nor boot a
# guest, nor take many seconds (`slow`: end-to-end deploys, reboots and
# reconnections over SSH; `make test` runs them).
# It runs on every core (pytest-xdist, the same groups as `make test`), then the
# `machine` tests alone: they change this machine's tuning or compare with it, so
# nothing runs beside them.
FAST := not kernel and not guest and not slow
check: setup lint
	$(BIN)/pytest -n auto --dist loadgroup --durations=15 -m "$(FAST) and not machine" tests/unit tests/integration
	$(BIN)/pytest --durations=5 -m "$(FAST) and machine" tests/unit tests/integration

unit: setup
	$(BIN)/pytest tests/unit

lint: setup
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
	shellcheck $(SHELL_SCRIPTS)
	@for p in $(C_PROGRAMS); do \
	    echo "cc -Wall -Wextra -Werror src/rtforge/$$p"; \
	    gcc -std=c99 -O2 -Wall -Wextra -Werror -pthread -fsyntax-only src/rtforge/$$p/*.c || exit 1; \
	done

bench: setup
	$(BIN)/python bench/probe_vs_cyclictest.py
	$(BIN)/python bench/report_speed.py

# Every Pi board's kernel built and booted on each of its emulated Pis (hours).
matrix: setup
	$(BIN)/python bench/pi_matrix.py

# The collection's files made from the one declaration of the latency options (src/rtforge/data/
# latency_options.toml): its modules run under Ansible's Python, without rtforge, so the declaration is written
# into them; tests/unit/fleet/test_collection_made.py fails while they differ.
collection: setup
	$(BIN)/python -m rtforge.fleet.collection

print-debs:
	@echo $(DEBS) $(foreach d,$(DEBS_BACKPORTS),$(firstword $(subst >=, ,$(d))))

clean:
	rm -rf $(VENV) .cache .pytest_cache .hypothesis src/*.egg-info
