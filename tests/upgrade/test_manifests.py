"""Expand, then contract: this code's `awa migrate` keeps everything each release needs.

Every manifest in tests/upgrade/manifests/ (what one release installed, per engine:
manifest.py) must still be there after this code's `awa migrate`, both on a database it lays
out new and on one the manifest's own release laid out first: functions with their
signatures, tables and views with their columns and types, triggers, enum values.  A line
this code cannot keep is named in ``RETIRED`` with the reason, never dropped silently.
"""

from __future__ import annotations

import subprocess

import pytest
from psycopg.conninfo import make_conninfo

from support.databases import create_database, drop_database
from upgrade import manifest, releases
from upgrade.releases import PREVIOUS, build
from upgrade.rolling import CURRENT, Code

MANIFESTS = sorted(manifest.MANIFESTS.glob("*.json"))

# Lines of older manifests that no release's code calls, and why each cannot stay.
RETIRED = {
    "function awa.qs_remove_live(p_id bigint, p_reason text) -> boolean":
        "called only by the awa.jobs view's triggers, which the same migration replaces; "
        "beside the three-argument form (its p_state DEFAULT NULL) a call with two arguments "
        "would be ambiguous",
}


def _needed(path) -> tuple[dict, list[str]]:
    data = manifest.load(path)
    return data, [line for line in data["objects"] if line not in RETIRED]


@pytest.mark.parametrize("path", MANIFESTS, ids=[p.stem for p in MANIFESTS])
def test_a_new_database_has_everything_each_release_needs(path, templates):
    """A database this code lays out serves every recorded release (a rollback onto a
    database created by this release, or an older worker joining it)."""
    data, needed = _needed(path)
    url = make_conninfo(templates.admin_url, dbname=templates.get(data["engine"]))
    assert manifest.missing(needed, manifest.installed(url)) == []


OLDER = [p for p in MANIFESTS if manifest.load(p)["release"] in PREVIOUS]


@pytest.mark.parametrize("path", OLDER, ids=[p.stem for p in OLDER])
def test_migrating_a_release_database_keeps_everything_it_needs(path, admin_url):
    """The release's own `awa migrate`, then this code's: nothing the release calls is gone,
    and the manifest still says what that release installs."""
    data, needed = _needed(path)
    name = create_database(admin_url)
    try:
        url = make_conninfo(admin_url, dbname=name)
        old = Code.of(build(data["release"]))
        first = old.migrate(url, data["engine"])
        assert first.returncode == 0, first.stderr
        assert manifest.installed(url) == data["objects"], (
            f"{path.name} is not what {data['release']} installs: regenerate it "
            f"(python tests/upgrade/manifest.py {data['release']})")
        then = CURRENT.migrate(url)
        assert then.returncode == 0, then.stderr
        assert manifest.missing(needed, manifest.installed(url)) == []
    finally:
        drop_database(admin_url, name)


def test_retired_lines_are_in_a_manifest():
    """Each exemption names a line some manifest really has (no stale exemptions)."""
    lines = {line for p in MANIFESTS for line in manifest.load(p)["objects"]}
    assert set(RETIRED) <= lines


def test_a_shallow_clone_fetches_the_release_or_says_how_to_get_it(tmp_path):
    """CI's clone may have no history: the release's commit is fetched from origin, and
    without an origin that has it the error says so in one line, with the fix."""
    sha = PREVIOUS["32a8704"]
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", "--depth", "1", f"file://{releases.ROOT}",
                    str(clone)], check=True, capture_output=True)
    assert subprocess.run(["git", "-C", str(clone), "cat-file", "-e", f"{sha}^{{commit}}"],
                          capture_output=True).returncode != 0
    releases.ensure_commit(sha, clone)  # fetched from origin
    assert subprocess.run(["git", "-C", str(clone), "cat-file", "-e", f"{sha}^{{commit}}"],
                          capture_output=True).returncode == 0

    lone = tmp_path / "lone"
    subprocess.run(["git", "clone", "--quiet", "--depth", "1", f"file://{releases.ROOT}",
                    str(lone)], check=True, capture_output=True)
    subprocess.run(["git", "-C", str(lone), "remote", "remove", "origin"], check=True)
    with pytest.raises(releases.ReleaseUnavailable) as refused:
        releases.ensure_commit(sha, lone)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(
        f"previous release {sha[:12]} is not in this clone and `git fetch origin {sha}` "
        f"failed (") and message.endswith("git fetch --unshallow) to run the upgrade tests")
