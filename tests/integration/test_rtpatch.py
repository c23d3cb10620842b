"""RT enablement for real: detection on Debian's 6.12 and 6.1 trees, and the
RT patch path on the real 6.1 tree (which has the PREEMPT_RT option but no
architecture selecting ARCH_SUPPORTS_RT).  The patches are made here from a
real change to that tree — what an RT patch does for enablement: select
ARCH_SUPPORTS_RT in arch Kconfig and add localversion-rt — and served in
kernel.org's layout from a loopback HTTP server, so candidate selection,
dry runs and application all run GNU patch on the real tree."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import lzma
import shutil
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest

from rtforge.cli import main
from rtforge.errors import UserError
from rtforge.kernel import fetch, rtpatch
from rtforge.kernel.rtpatch import (
    ENV_RT_BASE_URL,
    detect_rt,
    index_names,
    list_rt_candidates,
    load_rt_patch,
    prepare_rt_tree,
    rt_symbol_for,
)
from rtforge.kernel.sources import KernelVersion, prepare_source

from ..support.kernelsrc import NONCE, serve, subset_tree

pytestmark = pytest.mark.usefixtures("kernel_cache_cleanup")

ARM64, ARM = "arch/arm64/Kconfig", "arch/arm/Kconfig"
# Where the change goes, and what it adds (arm with a condition, as RT patches do).
ANCHORS = {ARM64: ("\tselect ARCH_SUPPORTS_ATOMIC_RMW\n", "\tselect ARCH_SUPPORTS_RT\n"),
           ARM: ("\tselect ARCH_KEEP_MEMBLOCK\n", "\tselect ARCH_SUPPORTS_RT if HAVE_POSIX_CPU_TIMERS_TASK_WORK\n")}


def diff(a: Path, b: Path) -> str:
    p = subprocess.run(["diff", "-Naur", a.name, b.name], cwd=a.parent, capture_output=True, text=True)
    assert p.returncode == 1, p.stderr          # 1: the trees differ
    return p.stdout


def make_patch(tree: Path, work: Path, *, rt: bool = True, localversion: str | None = None,
               base_edit=lambda rel, text: text, anchors=ANCHORS) -> str:
    """diff -Naur of the arch Kconfig files of tree (as base_edit makes them)
    before and after the enablement change."""
    a, b = work / "a", work / "b"
    for rel, (anchor, line) in anchors.items():
        text = base_edit(rel, (tree / rel).read_text())
        assert anchor in text, (rel, anchor)
        for side, content in ((a, text), (b, text.replace(anchor, anchor + line, 1) if rt else text)):
            (side / rel).parent.mkdir(parents=True, exist_ok=True)
            (side / rel).write_text(content)
    if localversion:
        (b / "localversion-rt").write_text(localversion + "\n")
    return diff(a, b)


@pytest.fixture(scope="module")
def patches(src61, tmp_path_factory):
    """The patch texts the kernel.org layouts are built from."""
    work = tmp_path_factory.mktemp("patches")
    tree = src61.path
    older = lambda rel, text: "# lines an older sublevel had\n" * 3 + text          # noqa: E731
    renamed = {ARM64: ("\tselect ARCH_OLD_SUPPORTS_ATOMIC_RMW\n", "\tselect ARCH_SUPPORTS_RT\n"), ARM: ANCHORS[ARM]}
    out = {
        "good": make_patch(tree, work / "good", localversion=f"-rt83-{NONCE}"),
        "offset": make_patch(tree, work / "offset", localversion=f"-rt82-{NONCE}", base_edit=older),
        "bad": make_patch(tree, work / "bad", localversion=f"-rt84-{NONCE}", anchors=renamed,
                          base_edit=lambda rel, t: t.replace("\tselect ARCH_SUPPORTS_", "\tselect ARCH_OLD_SUPPORTS_")),
        "no_rt": make_patch(tree, work / "no_rt", rt=False, localversion=f"-rt80-{NONCE}"),
    }
    # A series whose second patch edits the line the first one adds.
    steps = [work / "s" / n for n in "abcd"]
    for d in steps[:1]:
        (d / "arch/arm64").mkdir(parents=True)
        shutil.copy(tree / ARM64, d / ARM64)
    shutil.copytree(steps[0], steps[1])
    k = steps[1] / ARM64
    k.write_text(k.read_text().replace(ANCHORS[ARM64][0], ANCHORS[ARM64][0] + ANCHORS[ARM64][1], 1))
    shutil.copytree(steps[1], steps[2])
    k = steps[2] / ARM64
    k.write_text(k.read_text().replace("\tselect ARCH_SUPPORTS_RT\n", "\tselect ARCH_SUPPORTS_RT\t# PREEMPT_RT\n"))
    shutil.copytree(steps[2], steps[3])
    (steps[3] / "localversion-rt").write_text(f"-rt83-series-{NONCE}\n")
    out["series"] = [("0001-arm64-select-ARCH_SUPPORTS_RT.patch", diff(steps[0], steps[1])),
                     ("0002-arm64-comment.patch", diff(steps[1], steps[2])),
                     ("0003-localversion.patch", diff(steps[2], steps[3]))]
    return out


def series_tar(entries: list[tuple[str, str]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        files = [("patches/series", "# rt series\n" + "".join(n + "\n" for n, _ in entries))]
        for name, text in files + [(f"patches/{n}", t) for n, t in entries]:
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return lzma.compress(buf.getvalue())


class Site:
    """kernel.org's layout under tmp/<nonce>-<name>/pub/linux/kernel/projects/rt/6.1/."""

    def __init__(self, root: Path, name: str, patches: dict):
        self.prefix = f"{NONCE}-{name}/pub/linux/kernel"
        self.rt = root / self.prefix / "projects/rt/6.1"
        self.patches = patches

    def add(self, filename: str, which: str, older: bool = False) -> Path:
        folder = self.rt / "older" if older else self.rt
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / filename
        if filename.startswith("patches-"):
            path.write_bytes(series_tar(self.patches[which]))
        else:
            text = self.patches[which].encode()
            path.write_bytes(lzma.compress(text) if filename.endswith(".xz") else gzip.compress(text, mtime=0))
        (folder / (filename.rsplit(".", 1)[0] + ".sign")).write_text("signature\n")   # kernel.org has these too
        return path


@pytest.fixture
def site(tmp_path, patches):
    root = tmp_path / "www"
    with serve(root) as server:
        def make(name):
            s = Site(root, name, patches)
            s.base = f"{server}/{s.prefix}"
            return s
        yield make


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_mainline_rt_on_the_real_6_12_tree(src612):
    arm64 = detect_rt(src612.path, "arm64")
    assert arm64.supported and arm64.symbol == "PREEMPT_RT" and arm64.needs_expert
    assert arm64.depends_on == ("EXPERT && ARCH_SUPPORTS_RT",) and arm64.arch_selects
    assert detect_rt(src612.path, "x86_64").supported
    arm = detect_rt(src612.path, "arm")
    assert not arm.supported and arm.reason.endswith("arch/arm does not select ARCH_SUPPORTS_RT")
    tree = prepare_rt_tree(src612, "arm64")
    assert tree.path == src612.path and tree.patch is None and tree.support.symbol == "PREEMPT_RT"
    assert prepare_rt_tree(src612, "arm64", "auto").notes          # "no RT patch needed"
    with pytest.raises(UserError, match="--rt-patch auto"):
        prepare_rt_tree(src612, "arm")


def test_6_1_has_the_option_but_no_architecture_selects_it(src61):
    for arch in ("arm64", "arm", "x86_64"):
        s = detect_rt(src61.path, arch)
        assert not s.supported and s.symbol == "PREEMPT_RT" and "does not select ARCH_SUPPORTS_RT" in s.reason
    assert rt_symbol_for(src61.version) == "PREEMPT_RT"
    assert rt_symbol_for(KernelVersion(4, 19, 71)) == "PREEMPT_RT_FULL"
    assert rt_symbol_for(KernelVersion(5, 3, 0)) == "PREEMPT_RT"


def test_old_preempt_rt_full_patches(src612, tmp_path):
    old = ("choice\n\tprompt \"Preemption Model\"\n\nconfig PREEMPT_RT_FULL\n\tbool \"Fully Preemptible Kernel (RT)\"\n"
           "\tdepends on IRQ_FORCED_THREADING\n\tselect PREEMPT_RT_BASE\n\tselect PREEMPT_RCU\n\thelp\n"
           "\t  All and everything\n\nendchoice\n")
    tree = subset_tree(src612, tmp_path / "t", {"kernel/Kconfig.preempt": old})
    s = detect_rt(tree, "arm")
    assert s.supported and s.symbol == "PREEMPT_RT_FULL" and s.depends_on == ("IRQ_FORCED_THREADING",)
    assert not s.needs_expert
    (tree / "kernel/Kconfig.preempt").write_text("config PREEMPT\n\tbool \"Preemptible Kernel\"\n")
    assert detect_rt(tree, "arm64").reason == "kernel/Kconfig.preempt has no PREEMPT_RT option"


def test_directory_index_formats():
    nginx = ('<html>\r\n<head><title>Index of /pub/linux/kernel/projects/rt/6.1/</title></head>\r\n<body>\r\n'
             '<h1>Index of /pub/linux/kernel/projects/rt/6.1/</h1><hr><pre><a href="../">../</a>\r\n'
             '<a href="incr/">incr/</a>                                              05-Nov-2025 16:02       -\r\n'
             '<a href="older/">older/</a>                                             05-Nov-2025 16:02       -\r\n'
             '<a href="patch-6.1.158-rt58.patch.xz">patch-6.1.158-rt58.patch.xz</a>  05-Nov-2025 16:02  98765\r\n'
             '<a href="sha256sums.asc">sha256sums.asc</a>                             05-Nov-2025 16:02   2345\r\n'
             '</pre><hr></body>\r\n</html>\r\n')
    assert index_names(nginx) == ["patch-6.1.158-rt58.patch.xz", "sha256sums.asc"]
    apache = '<tr><td><a href="?C=N;O=D">Name</a></td></tr><tr><td><a href="patches-6.1.158-rt58.tar.xz">x</a>'
    assert index_names(apache) == ["patches-6.1.158-rt58.tar.xz"]
    python = '<ul>\n<li><a href="patch-6.1.158-rt58.patch.gz">patch-6.1.158-rt58.patch.gz</a></li>\n</ul>'
    assert index_names(python) == ["patch-6.1.158-rt58.patch.gz"]


@pytest.mark.slow
def test_auto_takes_the_exact_sublevel_with_the_highest_rt(src61, site):
    s = site("exact")
    # The same change with a first line of this test's own: a tree made of "good" by a test before it
    # (test_explicit_patch_files_and_urls, in a random order) would be reused, and no dry run seen.
    s.patches = {**s.patches, "own": f"This test's own RT patch, {uuid.uuid4().hex}\n\n" + s.patches["good"]}
    served = s.add("patch-6.1.192-rt83.patch.xz", "own")
    s.add("patch-6.1.192-rt83.patch.gz", "own")
    s.add("patches-6.1.192-rt83.tar.xz", "series")
    s.add("patch-6.1.192-rt82.patch.xz", "bad", older=True)
    s.add("patch-6.1.191-rt81.patch.xz", "offset", older=True)
    s.add("patch-6.2.1-rt1.patch.xz", "bad")                      # another series: ignored
    assert [c.name for c in list_rt_candidates(src61.version, s.base)] == \
        ["patch-6.1.192-rt83.patch.xz", "patch-6.1.191-rt81.patch.xz"]
    pristine = {rel: (sha(src61.path / rel), (src61.path / rel).stat().st_ino) for rel in (ARM64, ARM)}
    steps = []
    tree = prepare_rt_tree(src61, "arm64", "auto", base_url=s.base, progress=lambda w, d, t: steps.append(w))
    assert tree.patch.name == "patch-6.1.192-rt83.patch.xz"
    assert tree.patch_id == f"patch-6.1.192-rt83.patch.xz sha256:{sha(served)}"
    assert [(a.name, a.ok) for a in tree.attempts] == [("patch-6.1.192-rt83.patch.xz", True)]
    assert steps.index("dry run of patch-6.1.192-rt83.patch.xz") < steps.index("copying the source tree")
    assert tree.path.parent == fetch.kernel_cache() / "rt" and tree.path != src61.path
    assert (tree.path / "localversion-rt").read_text() == f"-rt83-{NONCE}\n"
    assert tree.support.supported and tree.support.symbol == "PREEMPT_RT"
    arm = detect_rt(tree.path, "arm")
    assert arm.supported and arm.arch_condition == "HAVE_POSIX_CPU_TIMERS_TASK_WORK"
    # The pristine tree is untouched; the copy shares every file the patch did not change.
    assert {rel: (sha(src61.path / rel), (src61.path / rel).stat().st_ino) for rel in (ARM64, ARM)} == pristine
    assert not (src61.path / "localversion-rt").exists()
    assert (tree.path / ARM64).stat().st_ino != pristine[ARM64][1]
    assert (tree.path / "Makefile").stat().st_ino == (src61.path / "Makefile").stat().st_ino
    # patch's complaints come back as one line: here, the patch is already in
    with pytest.raises(rtpatch._Failed, match=f"already applied to {ARM}, {ARM64}"):
        rtpatch._patch(tree.path, tree.patch.files[0], 1, dry_run=True)
    # Offline, auto reuses what it chose.
    again = prepare_rt_tree(src61, "arm64", "auto", base_url="http://127.0.0.1:9/nowhere")
    assert again.path == tree.path and "reusing" in again.notes[0]


@pytest.mark.slow
def test_auto_falls_back_to_the_nearest_sublevel(src61, site):
    s = site("nearest")
    s.add("patch-6.1.193-rt84.patch.xz", "bad")
    s.add("patch-6.1.190-rt82.patch.xz", "offset", older=True)
    s.add("patch-6.1.190-rt79.patch.xz", "bad", older=True)
    s.add("patch-6.1.189-rt80.patch.xz", "offset", older=True)
    assert [c.name for c in list_rt_candidates(src61.version, s.base)] == \
        ["patch-6.1.193-rt84.patch.xz", "patch-6.1.190-rt82.patch.xz", "patch-6.1.189-rt80.patch.xz"]
    tree = prepare_rt_tree(src61, "arm64", "auto", base_url=s.base)
    assert [(a.name, a.ok) for a in tree.attempts] == [("patch-6.1.193-rt84.patch.xz", False),
                                                        ("patch-6.1.190-rt82.patch.xz", True)]
    assert tree.attempts[0].why == f"hunks fail in {ARM64}"
    assert tree.attempts[1].why == "applies (made for 6.1.190)"
    assert (tree.path / "localversion-rt").read_text() == f"-rt82-{NONCE}\n"
    assert "\tselect ARCH_SUPPORTS_ATOMIC_RMW\n\tselect ARCH_SUPPORTS_RT\n" in (tree.path / ARM64).read_text()
    assert not list(tree.path.glob("arch/*/Kconfig.orig"))          # applied with offset, no backups
    assert detect_rt(src61.path, "arm64").supported is False          # pristine still without RT


@pytest.mark.slow
def test_auto_fails_naming_every_candidate(src61, site, tmp_path, monkeypatch):
    s = site("none")
    s.add("patch-6.1.193-rt84.patch.xz", "bad")
    s.add("patch-6.1.191-rt80.patch.xz", "no_rt", older=True)
    # a cache of its own: the shared one holds other workers' trees, made or half-made as this runs
    monkeypatch.setenv("RTFORGE_CACHE_DIR", str(tmp_path / "cache"))
    rt_dir = fetch.kernel_cache() / "rt"
    before = set(rt_dir.iterdir()) if rt_dir.is_dir() else set()
    with pytest.raises(UserError) as e:
        prepare_rt_tree(src61, "arm64", "auto", base_url=s.base)
    msg = str(e.value)
    assert "patch-6.1.193-rt84.patch.xz: hunks fail in arch/arm64/Kconfig" in msg
    assert ("patch-6.1.191-rt80.patch.xz: applies, but does not enable PREEMPT_RT (kernel/Kconfig.preempt has "
            "PREEMPT_RT, but arch/arm64 does not select ARCH_SUPPORTS_RT)") in msg
    assert "\n" not in msg
    assert (set(rt_dir.iterdir()) if rt_dir.is_dir() else set()) == before     # nothing half-made kept
    empty = site("empty")
    with pytest.raises(UserError, match="no RT patches for 6.1 found at"):
        prepare_rt_tree(src61, "arm64", "auto", base_url=empty.base)


@pytest.mark.slow
def test_a_series_tarball_is_applied_in_order(src61, site, patches, tmp_path):
    s = site("series")
    s.add("patches-6.1.192-rt83.tar.xz", "series")
    tree = prepare_rt_tree(src61, "arm64", "auto", base_url=s.base)
    assert tree.patch.series and len(tree.patch.files) == 3
    assert "\tselect ARCH_SUPPORTS_RT\t# PREEMPT_RT\n" in (tree.path / ARM64).read_text()
    assert tree.support.supported and not detect_rt(tree.path, "arm").supported
    # Why a series is proven in a throwaway copy: patch --dry-run cannot see
    # what the series' first patch would have changed.
    both = tmp_path / "both.patch"
    both.write_text(patches["series"][0][1] + patches["series"][1][1])
    p = subprocess.run(["patch", "-p1", "--dry-run", "--batch", "-d", str(src61.path), "-i", str(both)],
                       capture_output=True, text=True)
    assert p.returncode != 0 and "FAILED" in p.stdout
    # The same series as a directory with a series file is the same patched tree.
    folder = tmp_path / "rt-series"
    folder.mkdir()
    (folder / "series").write_text("".join(f"{n} -p1\n" for n, _ in patches["series"]))
    for name, text in patches["series"]:
        (folder / name).write_text(text)
    from_dir = prepare_rt_tree(src61, "arm64", str(folder))
    assert from_dir.path == tree.path and from_dir.patch.patch_id.startswith("rt-series (series of 3) sha256:")


def test_explicit_patch_files_and_urls(src61, site, patches, tmp_path):
    plain = tmp_path / "rt.patch"
    plain.write_text(patches["good"])
    gz = tmp_path / "rt.patch.gz"
    gz.write_bytes(gzip.compress(patches["good"].encode()))
    first = prepare_rt_tree(src61, "arm64", str(plain))
    assert first.patch_id == f"rt.patch sha256:{sha(plain)}" and (first.path / "localversion-rt").is_file()
    assert prepare_rt_tree(src61, "arm64", str(gz)).path == first.path     # same content, same tree
    s = site("explicit")
    s.add("patch-6.1.192-rt83.patch.xz", "good")
    by_url = prepare_rt_tree(src61, "arm64", f"{s.base}/projects/rt/6.1/patch-6.1.192-rt83.patch.xz")
    assert by_url.path == first.path and by_url.patch.origin.startswith("http://127.0.0.1:")
    bad = tmp_path / "bad.patch"
    bad.write_text(patches["bad"])
    with pytest.raises(UserError, match="the RT patch bad.patch cannot be used on debian:6.1 .*: hunks fail in "
                                        "arch/arm64/Kconfig"):
        prepare_rt_tree(src61, "arm64", str(bad))
    elsewhere = tmp_path / "elsewhere.patch"
    elsewhere.write_text(patches["good"].replace("arch/arm64/Kconfig", "arch/arm64/Kconfig.gone"))
    with pytest.raises(UserError, match="files to patch are missing: arch/arm64/Kconfig.gone"):
        prepare_rt_tree(src61, "arm64", str(elsewhere))
    notes = tmp_path / "notes.txt"
    notes.write_text("just words\n")
    with pytest.raises(UserError, match="not a patch"):
        load_rt_patch(str(notes))
    with pytest.raises(UserError, match="no such file"):
        load_rt_patch(str(tmp_path / "missing.patch"))


@pytest.mark.slow
def test_cli_rt_patch_auto(src61, site, monkeypatch, capsys):
    s = site("cli")
    s.add("patch-6.1.192-rt83.patch.xz", "good")
    monkeypatch.setenv(ENV_RT_BASE_URL, s.base)
    assert main(["kernel", "source", "debian:6.1", "--board", "pi4-64", "--rt-patch", "auto", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rt"]["rt_patch_id"].startswith("patch-6.1.192-rt83.patch.xz sha256:")
    assert doc["rt"]["rt_symbol"] == "PREEMPT_RT" and doc["rt"]["attempts"][0]["ok"]
    assert main(["kernel", "source", "debian:6.1", "--board", "pi4-64"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--rt-patch auto" in err[0]


@pytest.mark.slow
def test_a_users_tree_is_copied_in_full_never_patched(src61, patches, tmp_path):
    user_tree = subset_tree(src61, tmp_path / "mine")
    before = {p: sha(p) for p in user_tree.rglob("*") if p.is_file()}
    src = prepare_source(f"dir:{user_tree}")
    plain = tmp_path / "rt.patch"
    plain.write_text(patches["good"])
    tree = prepare_rt_tree(src, "arm64", str(plain))
    assert tree.path != user_tree and tree.support.supported
    assert (tree.path / "Makefile").stat().st_ino != (user_tree / "Makefile").stat().st_ino   # not hard links
    assert {p: sha(p) for p in user_tree.rglob("*") if p.is_file()} == before
    assert not detect_rt(user_tree, "arm64").supported
