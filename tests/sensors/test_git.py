"""The git sensor on real repositories made with `git init` in tmp dirs, run by the test
kit on its fake clock: branch, clean, head_contains, tag_at_head, ahead_of/behind; a repo
moved away is an error (never refuted); a symlinked repo outside the roots is refused."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from tests.support import eventually

from memwarden.errors import ValidationInputError
from memwarden.plugins import Outcome
from memwarden.plugins.testing import FakeClock, SensorHarness
from memwarden.sensors.git import GitBinding, GitSensor

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/nonexistent",
    "PATH": os.environ["PATH"],
}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=repo, env=GIT_ENV, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def commit(repo: Path, name: str, text: str = "x") -> str:
    (repo / name).write_text(text)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", f"add {name}")
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def roots(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    repo = root / "shop"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "README", "shop")
    return root


def harness(tmp_path: Path, root: Path, bindings: list[dict[str, Any]]) -> SensorHarness:
    return SensorHarness(
        GitSensor,
        config={"roots": [str(root)], "interval": "60s", "jitter": 0, "confirm_every": "1h"},
        bindings=bindings,
        clock=FakeClock(),
        tmp_path=tmp_path / "kit",
    )


async def test_branch_switch_refutes_and_coming_back_confirms(tmp_path, roots):
    """On main: confirmed; switched to a feature branch: refuted, observing the branch."""
    repo = roots / "shop"
    async with harness(tmp_path, roots, [{"repo": "shop", "branch": "main"}]) as h:
        [first] = await h.wait_for_events(1)
        assert (first.outcome, first.observed) == (Outcome.CONFIRMED, "main")
        git(repo, "switch", "-q", "-c", "feature")
        h.advance(1)
        [answer] = await h.revalidate("shop")
        assert (answer.outcome, answer.observed) == (Outcome.REFUTED, "feature")
        git(repo, "switch", "-q", "main")
        h.advance(1)
        [back] = await h.revalidate("shop")
        assert back.outcome == Outcome.CONFIRMED


async def test_a_dirty_file_makes_clean_false_and_a_commit_clean_again(tmp_path, roots):
    """`clean: true` is refuted by a modified or untracked file and confirmed after a commit."""
    repo = roots / "shop"
    async with harness(tmp_path, roots, [{"repo": "shop", "clean": True}]) as h:
        [first] = await h.wait_for_events(1)
        assert first.outcome == Outcome.CONFIRMED
        (repo / "README").write_text("changed")
        h.advance(1)
        [dirty] = await h.revalidate("shop")
        assert (dirty.outcome, dirty.observed) == (Outcome.REFUTED, False)
        git(repo, "commit", "-q", "-am", "change")
        h.advance(1)
        [clean] = await h.revalidate("shop")
        assert clean.outcome == Outcome.CONFIRMED


async def test_head_contains_a_commit_until_an_orphan_branch(tmp_path, roots):
    """A commit is contained while it is an ancestor of HEAD; an orphan branch refutes it."""
    repo = roots / "shop"
    old = git(repo, "rev-parse", "HEAD")
    commit(repo, "more")
    async with harness(tmp_path, roots, [{"repo": "shop", "head_contains": old[:10]}]) as h:
        [first] = await h.wait_for_events(1)
        assert first.outcome == Outcome.CONFIRMED
        git(repo, "switch", "-q", "--orphan", "fresh-start")
        commit(repo, "other")
        h.advance(1)
        [answer] = await h.revalidate("shop")
        assert answer.outcome == Outcome.REFUTED


async def test_tag_at_head_and_distance_to_a_ref(tmp_path, roots):
    """tag_at_head follows the tag; ahead_of counts commits since the ref, exactly with `by`."""
    repo = roots / "shop"
    git(repo, "tag", "v1.0")
    git(repo, "branch", "base")
    bindings = [
        {"repo": "shop", "tag_at_head": "v1.0"},
        {"repo": "shop", "ahead_of": "base", "by": 2},
        {"repo": "shop", "behind": "base"},
    ]
    async with harness(tmp_path, roots, bindings) as h:
        await h.wait_for_events(3)
        ids = {
            b.selector.model_dump(exclude_none=True).get("tag_at_head", "x"): b for b in h.bindings
        }
        tag_block = ids["v1.0"].block_id
        ahead = next(b for b in h.bindings if b.selector.ahead_of == "base").block_id
        behind = next(b for b in h.bindings if b.selector.behind == "base").block_id
        assert (await h.block(block_id=tag_block)).state == "fresh"
        assert (await h.block(block_id=ahead)).state != "fresh"  # 0 ahead, 2 wanted
        commit(repo, "a")
        commit(repo, "b")
        h.advance(1)
        [tag] = await h.revalidate(block_id=tag_block)
        assert tag.outcome == Outcome.REFUTED
        [dist] = await h.revalidate(block_id=ahead)
        assert (dist.outcome, dist.observed) == (Outcome.CONFIRMED, {"ahead": 2, "behind": 0})
        [not_behind] = await h.revalidate(block_id=behind)
        assert not_behind.outcome == Outcome.REFUTED


def watching_harness(tmp_path: Path, root: Path, bindings: list[dict[str, Any]]) -> SensorHarness:
    """Polling every hour on a clock that never moves: only the watcher can see a change."""
    return SensorHarness(
        GitSensor,
        config={"roots": [str(root)], "interval": "1h", "jitter": 0, "debounce_ms": 20},
        bindings=bindings,
        clock=FakeClock(),
        tmp_path=tmp_path / "kit",
    )


async def test_a_switch_and_a_commit_are_seen_at_once_through_the_watcher(tmp_path, roots):
    """With a 1h interval and a clock that never moves, `git switch` refutes `branch` and
    a commit confirms `ahead_of` within seconds: HEAD and refs are watched."""
    repo = roots / "shop"
    git(repo, "tag", "v0")
    bindings = [{"repo": "shop", "branch": "main"}, {"repo": "shop", "ahead_of": "v0"}]
    async with watching_harness(tmp_path, roots, bindings) as h:
        await h.wait_for_events(2)
        await eventually(lambda: h.sensor.watching == 1)
        git(repo, "switch", "-q", "-c", "feature")
        switched = await h.wait_outcome(Outcome.REFUTED, subject="shop", since=2, timeout_s=20)
        assert switched.observed == "feature"
        commit(repo, "more")
        ahead = await h.wait_outcome(Outcome.CONFIRMED, since=3, timeout_s=20)
        assert ahead.observed == {"ahead": 1, "behind": 0}
        git(repo, "tag", "v1")  # a ref that no binding's answer depends on: nothing emitted
        git(repo, "switch", "-q", "main")
        back = await h.wait_outcome(Outcome.CONFIRMED, since=4, timeout_s=20)
        assert back.observed == "main"
        assert h.sensor.poll_counters.revalidations == 0


async def test_a_linked_work_tree_is_watched_through_its_gitdir(tmp_path, roots):
    """A `git worktree add` tree (``.git`` is a file) is followed to its git directory."""
    repo = roots / "shop"
    git(repo, "worktree", "add", "-q", "-b", "side", str(roots / "side"))
    async with watching_harness(tmp_path, roots, [{"repo": "side", "branch": "side"}]) as h:
        [first] = await h.wait_for_events(1)
        assert first.outcome == Outcome.CONFIRMED
        await eventually(lambda: h.sensor.watching == 1)
        git(roots / "side", "switch", "-q", "-c", "other")
        moved = await h.wait_outcome(Outcome.REFUTED, since=1, timeout_s=20)
        assert moved.observed == "other"


async def test_watch_off_leaves_polling_alone(tmp_path, roots):
    """`watch = false`: nothing is watched; the interval (and revalidation) still check."""
    repo = roots / "shop"
    async with SensorHarness(
        GitSensor,
        config={"roots": [str(roots)], "interval": "60s", "jitter": 0, "watch": False},
        bindings=[{"repo": "shop", "branch": "main"}],
        clock=FakeClock(),
        tmp_path=tmp_path / "kit",
    ) as h:
        await h.wait_for_events(1)
        assert h.sensor.watching == 0
        git(repo, "switch", "-q", "-c", "feature")
        h.advance(60)
        polled = await h.wait_outcome(Outcome.REFUTED, since=1, timeout_s=20)
        assert polled.observed == "feature"


async def test_a_repo_moved_away_is_an_error_never_refuted(tmp_path, roots):
    """Losing the repository is not evidence against the fact: an `error`, state kept."""
    async with harness(tmp_path, roots, [{"repo": "shop", "branch": "main"}]) as h:
        await h.wait_for_events(1)
        shutil.move(roots / "shop", tmp_path / "elsewhere")
        h.advance(1)
        [answer] = await h.revalidate("shop")
        assert answer.outcome == Outcome.ERROR
        assert "not a git work tree" in (answer.message or "")
        assert (await h.block("shop")).state == "fresh"


async def test_a_symlinked_repo_pointing_outside_the_roots_is_refused(tmp_path, roots):
    """A link inside the roots to a repository outside them is refused when bound."""
    outside = tmp_path / "outside"
    outside.mkdir()
    git(outside, "init", "-q", "-b", "main")
    (roots / "link").symlink_to(outside)
    async with harness(tmp_path, roots, []) as h:
        with pytest.raises(ValidationInputError, match="outside the sensor's roots"):
            await h.set_bindings([{"repo": "link", "branch": "main"}])
        with pytest.raises(ValidationInputError, match="outside the sensor's roots"):
            await h.set_bindings([{"repo": str(outside), "branch": "main"}])


async def test_a_link_swapped_in_later_is_an_error_at_check_time(tmp_path, roots):
    """A repo replaced by a link to outside after it was bound is answered with an error."""
    outside = tmp_path / "outside"
    outside.mkdir()
    git(outside, "init", "-q", "-b", "main")
    async with harness(tmp_path, roots, [{"repo": "shop", "branch": "main"}]) as h:
        await h.wait_for_events(1)
        shutil.rmtree(roots / "shop")
        (roots / "shop").symlink_to(outside)
        h.advance(1)
        [answer] = await h.revalidate("shop")
        assert answer.outcome == Outcome.ERROR
        assert "outside" in (answer.message or "")


@pytest.mark.parametrize(
    "binding",
    [
        {"repo": "shop", "branch": "--output=/tmp/x"},
        {"repo": "shop", "ahead_of": "-c"},
        {"repo": "shop", "branch": "a..b"},
        {"repo": "shop", "branch": "HEAD@{1}"},
        {"repo": "shop", "head_contains": "--all"},
        {"repo": "shop", "head_contains": "main"},
        {"repo": "-C/tmp", "branch": "main"},
        {"repo": "shop", "clean": "yes"},
        {"repo": "shop"},
        {"repo": "shop", "branch": "main", "clean": True},
        {"repo": "shop", "branch": "main", "by": 1},
    ],
)
def test_bindings_that_could_be_options_or_are_loose_are_refused(binding):
    """Refs and commits never look like options; bindings are strict and name one thing."""
    with pytest.raises(ValidationError):
        GitBinding.model_validate(binding)


async def test_git_runs_without_the_daemons_git_environment(tmp_path, roots, monkeypatch):
    """Inherited GIT_* variables do not reach git: a GIT_DIR elsewhere changes nothing."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    git(elsewhere, "init", "-q", "-b", "other")
    monkeypatch.setenv("GIT_DIR", str(elsewhere / ".git"))
    async with harness(tmp_path, roots, [{"repo": "shop", "branch": "main"}]) as h:
        [first] = await h.wait_for_events(1)
        assert (first.outcome, first.observed) == (Outcome.CONFIRMED, "main")


def test_describe_lists_the_roots_and_valid_examples(tmp_path, roots):
    """describe() names the roots, and each example is a binding the model accepts."""
    sensor = GitSensor(GitSensor.Config.model_validate({"roots": [str(roots)]}))
    described = sensor.describe()
    assert described["binds"]["roots"] == [str(roots)]
    for example in described["examples"]:
        GitBinding.model_validate(example)
