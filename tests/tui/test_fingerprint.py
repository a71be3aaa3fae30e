"""awa.fingerprint: one poison bug, one group (issue 17 item 4's pure part)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from awa.fingerprint import fingerprint, group_errors, normalize

T0 = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


def test_masks_what_varies_between_occurrences():
    assert normalize("upload-15.csv: unexpected byte 0xff at offset 1337") == \
        "<file>: unexpected byte <hex> at offset <n>"
    assert normalize("unsupported country 'XX'") == "unsupported country '?'"
    assert normalize('KeyError: "user_42"') == 'KeyError: "?"'
    assert normalize("job 6f1c1b9e-0000-4000-8000-000000000001 not found") == "job <uuid> not found"
    assert normalize("cannot open /srv/data/2026/01/in.json") == "cannot open <path>"
    assert normalize("digest deadbeef1234 mismatch") == "digest <hex> mismatch"
    assert normalize("timeout after 30.5s") == "timeout after <n>s"
    traceback = "ValueError: bad\nTraceback (most recent call last):\n  ..."
    assert normalize(traceback) == "ValueError: bad"


def test_words_that_only_look_like_files_stay():
    assert normalize("psycopg.errors.UniqueViolation on awa.jobs_hot") == \
        "psycopg.errors.UniqueViolation on awa.jobs_hot"
    assert normalize("payment gateway timed out") == "payment gateway timed out"


def test_ten_dlq_entries_of_one_poison_bug_are_one_group_of_ten():
    rows = [{"job_id": 100 + n, "kind": "parse_upload", "queue": "imports",
             "dlq_at": T0 + timedelta(minutes=n),
             "last_error": f"upload-{n * 15}.csv: unexpected byte 0xff at offset {1337 + n}"}
            for n in range(10)]
    rows.append({"job_id": 7, "kind": "validate_address", "queue": "imports", "dlq_at": T0,
                 "last_error": "unsupported country 'XX'"})
    groups = group_errors(rows)
    assert [g.count for g in groups] == [10, 1]
    poison = groups[0]
    assert poison.pattern == "<file>: unexpected byte <hex> at offset <n>"
    assert poison.first_seen == T0 and poison.last_seen == T0 + timedelta(minutes=9)
    assert poison.kinds == {"parse_upload"} and poison.queues == {"imports"}
    assert poison.job_ids == list(range(100, 110))
    assert poison.example.startswith("upload-0.csv")


def test_fingerprint_is_stable_and_can_keep_kinds_apart():
    assert fingerprint("boom 1") == fingerprint("boom 2") == fingerprint(" boom  3 ")
    assert fingerprint("boom", "a") != fingerprint("boom", "b")
    assert len(fingerprint(None)) == 12
