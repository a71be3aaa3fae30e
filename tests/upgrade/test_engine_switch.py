"""The live switch of storage engines under load (tests/upgrade/switch.py says what a run
does): 2,000 jobs, two workers and producers running throughout; enter-mixed mid-run, then
finalize once canonical drained, and the abort path on its own database.  Each checks the
verdict: 0 lost, 0 run twice, 0 error lines, every step rc 0, both engines completed jobs,
no job in both engines, the final state; refusals while draining are one line each."""

from __future__ import annotations

import pytest

from upgrade import switch

JOBS = 2_000


@pytest.mark.slow
@pytest.mark.xdist_group("upgrade")
@pytest.mark.connections(30)  # 2 workers x (4 pooled + 3), 2 producers x 2, the CLI steps
@pytest.mark.parametrize("abort", [False, True], ids=["finalize", "abort"])
def test_a_loaded_fleet_switches_engines_live_without_a_lost_or_repeated_job(
        abort, admin_url, tmp_path):
    verdict = switch.run(JOBS, admin_url, tmp_path, abort=abort)
    print(f"\n{'abort' if abort else 'switch'}: {verdict.line()}\n"
          + "\n".join(f"  {k}: {v}" for k, v in verdict.outputs.items()))
    assert (verdict.lost, verdict.run_twice, verdict.error_lines, verdict.in_both) == (
        0, 0, [], 0), verdict.line()
    assert set(verdict.step_rcs.values()) == {0}, (verdict.step_rcs, verdict.outputs)
    assert "] dry run: would lay queue storage out in schema 'awa'" in verdict.outputs[
        "prepare --dry-run"]
    assert "] mixed transition entered" in verdict.outputs["enter-mixed"]
    assert verdict.completed_canonical > 0 and verdict.completed_queue_storage > 0, \
        verdict.line()
    assert verdict.final_state == ("canonical" if abort else "active")
    for said in verdict.refusals:
        assert said.startswith("error: ") and "\n" not in said, said
