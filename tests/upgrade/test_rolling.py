"""A rolling upgrade from the previous release to this code, and the rollback, under load.

The small version of benchmarks/upgrade.py (rolling.py says what one run does): 2,000 jobs per
run, each run about 25-35 s, on one xdist worker so runs never share the two cores.  Each
checks the verdict (0 lost, 0 run twice, 0 error lines in any old or new process's log,
`awa migrate` rc 0; the old release's own error lines before the migration started are
printed, not counted: they are that release's), that `awa migrate --contract` is refused in
one line naming the two older runtimes while they are live, in both directions, when they
speak an older schema or layout (and runs when they speak this code's), and that it runs once
they stopped.  The releases before it roll in benchmarks/upgrade.py; what they
need of the database is checked here by tests/upgrade/test_manifests.py, at a fraction of
the cost.
"""

from __future__ import annotations

import pytest

from upgrade import rolling
from upgrade.releases import NEWEST

JOBS = 2_000


@pytest.mark.slow
@pytest.mark.xdist_group("upgrade")
@pytest.mark.connections(40)  # 4 workers x (4 pooled + 3), 2 producers x 2, the checks
@pytest.mark.parametrize("engine", ["queue_storage", "canonical"])
@pytest.mark.parametrize("release", [NEWEST])
def test_a_fleet_rolls_forward_and_back_without_a_lost_or_repeated_job(
        release, engine, admin_url, tmp_path):
    verdicts = rolling.run(release, engine, JOBS, admin_url, tmp_path)
    forward, back = verdicts["roll"], verdicts["rollback"]
    print(f"\n{release} -> this code, {engine}: {forward.line()}\n"
          f"rollback to {release}: {back.line()}\n"
          + "\n".join(back.notes + forward.error_lines_before))
    for verdict in (forward, back):
        assert (verdict.lost, verdict.run_twice, verdict.error_lines, verdict.migrate_rc) == (
            0, 0, [], 0), verdict.line()
        rc, said = verdict.contract
        if forward.older_layout:  # refused in one line, naming the two older runtimes
            assert rc == 1 and said.startswith("error: contract refused: 2 live runtime(s) "
                                               "speak an older layout: "), said
            assert "\n" not in said
        else:  # the same layout on both sides: nothing live needs what it drops
            assert rc == 0, said
    assert forward.migrate_s < 60 and forward.claim_stall_ms < 5_000, forward.line()
    assert back.notes[0].startswith("contract once all stopped: 0 "), back.notes
