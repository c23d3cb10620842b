"""What a `dir:` tree is, found without running anything of the tree's.

A tree on disk is the user's, and may come from anywhere: its .git/config
is code for git (`core.fsmonitor` runs a command on `git status`, a clean
filter runs on every changed file, hooks run on index updates), and rtforge
runs as root.  So the commit is read from .git's own files (HEAD, a loose
ref or packed-refs), bounded and without following links, and whether the
work tree differs from it is asked of git through a private git directory
made here: its config is rtforge's (empty), its index a copy of the tree's,
its objects the tree's (as an alternate).  Git then compares the tree with
the index and runs nothing that the tree configured; the tree's own .git is
never written.

    identity(tree) -> "git:<commit>[+dirty]" | "files:<count>,newest:<ISO mtime>"
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from ..errors import UserError
from ..paths import read_regular_bounded

_HASH = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_REF = re.compile(r"refs/[A-Za-z0-9._+/-]{1,200}")
REF_MAX = 4 << 10             # HEAD and a loose ref are one line
PACKED_REFS_MAX = 64 << 20    # linux.git's packed-refs, every tag: a few MB
INDEX_MAX = 256 << 20         # a kernel tree's index: ~10 MB
STATUS_TIMEOUT_S = 300


def _small(path: Path, limit: int = REF_MAX) -> str | None:
    """A file of .git as text; None when it is missing or not a bounded regular file."""
    try:
        return read_regular_bounded(path, limit, str(path)).decode("utf-8", "replace")
    except (OSError, UserError):
        return None


def _ref_target(gitdir: Path, ref: str) -> str | None:
    """What a ref names: its loose file, else its line in packed-refs."""
    if not _REF.fullmatch(ref) or any(part in ("", ".", "..") for part in ref.split("/")):
        return None
    loose = _small(gitdir / ref)
    if loose is not None:
        return loose.strip()
    for line in (_small(gitdir / "packed-refs", PACKED_REFS_MAX) or "").splitlines():
        value, _, name = line.partition(" ")
        if name == ref:
            return value
    return None


def git_head(tree: Path) -> str | None:
    """The commit the tree's HEAD names, read from .git's files; None when the
    tree has no .git folder of its own (none, a link, a worktree's .git file)
    or no commit yet."""
    gitdir = tree / ".git"
    try:
        if not stat.S_ISDIR(os.lstat(gitdir).st_mode):
            return None
    except OSError:
        return None
    value = (_small(gitdir / "HEAD") or "").strip()
    for _ in range(5):  # HEAD -> a branch -> (rarely) one more symbolic ref
        if _HASH.fullmatch(value):
            return value
        if not value.startswith("ref: "):
            return None
        value = _ref_target(gitdir, value[5:].strip()) or ""
    return None


def git_dirty(tree: Path, commit: str) -> bool:
    """Whether the tree's tracked files differ from commit, asked through a
    private git directory (see the module's docstring); True when git
    cannot tell (the id then differs from a clean one: a rebuild, never a
    wrong reuse)."""
    try:
        index = read_regular_bounded(tree / ".git" / "index", INDEX_MAX, f"{tree}/.git/index")
    except (OSError, UserError):
        return True
    with tempfile.TemporaryDirectory(prefix="rtforge-gitdir-") as tmp:
        gitdir = Path(tmp)
        (gitdir / "objects" / "info").mkdir(parents=True)
        (gitdir / "refs").mkdir()
        (gitdir / "objects" / "info" / "alternates").write_text(f"{tree / '.git' / 'objects'}\n")
        (gitdir / "HEAD").write_text(commit + "\n")
        (gitdir / "index").write_bytes(index)
        (gitdir / "config").write_text("[core]\n\trepositoryformatversion = 0\n\tbare = false\n")
        env = {**os.environ, "GIT_DIR": str(gitdir), "GIT_WORK_TREE": str(tree), "GIT_CONFIG_NOSYSTEM": "1",
               "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
        argv = ["git", "-c", "core.fsmonitor=false", "-c", f"core.hooksPath={os.devnull}", "status", "--porcelain",
                "--untracked-files=no", "--ignore-submodules=all"]
        try:
            p = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                               timeout=STATUS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return True
    return p.returncode != 0 or bool(p.stdout.strip())


def files_identity(tree: Path) -> str:
    """Cheap, not a content hash: how many files, and the newest time stamp."""
    count, newest = 0, 0.0
    for root, dirs, files in os.walk(tree):
        dirs[:] = [d for d in dirs if d != ".git"]
        for f in files:
            try:
                st = os.lstat(os.path.join(root, f))
            except OSError:
                continue
            count += 1
            newest = max(newest, st.st_mtime)
    stamp = datetime.fromtimestamp(newest, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return f"files:{count},newest:{stamp}"


def identity(tree: Path) -> str:
    commit = git_head(tree)
    if commit is not None and shutil.which("git"):
        return f"git:{commit}" + ("+dirty" if git_dirty(tree, commit) else "")
    return files_identity(tree)
