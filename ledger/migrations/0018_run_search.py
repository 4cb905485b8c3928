"""The runs list's word search at a million runs: ``Run.search_steps`` and one trigram index.

A run is found by words in any order across its id, title, labels, blocked step, error and
detail (its own columns) and the ids, effect keys and error heads of its effect steps and of
its steps that failed (``search_steps``). On PostgreSQL:

- ``search_steps`` is fed by two row triggers on ``ledger_step`` whose WHEN is checked before
  any function runs: an inserted or updated effect step, or a step whose error changed, appends
  a row ``step_id effect_key error-head`` to ``ledger_runsearchdelta`` (an INSERT: it takes no
  lock on the run row, which the step's writer and a fan-out's other steps hold FOR SHARE);
  ``ledger.transitions.search.fold_search_words`` (each sweep) appends them to the run's
  ``search_steps`` (once: a fragment already there is not appended again; at most 4,000
  characters). Read, model and clock steps pay nothing.
  The existing steps are folded in here, after the triggers exist, in this migration's
  transaction (CREATE TRIGGER's lock holds step writers off until it commits).
- ``run_search_trgm`` is a GIN trigram index over ``UPPER`` of one expression of those columns
  (``ledger.selectors.runs.RUN_SEARCH_DOC``, the same text): every word is a ``LIKE`` on it, and
  the words of one search are one index scan. It replaces ``run_title_trgm`` (the title alone).

Without ``pg_trgm`` (no privilege to create it) the search still works, by scanning. On SQLite
(the embedded default) ``search_steps`` stays empty and the search looks at the step table
itself (``LIKE`` over both tables: fine at a demo's size).
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

# Frozen copy of ledger.selectors.runs.RUN_SEARCH_DOC (a test checks the two agree).
DOC = (
    "UPPER(run_id || ' ' || title || ' ' || labels::text || ' ' || blocked_step_id || ' ' "
    "|| LEFT(error, 300) || ' ' || LEFT(detail, 300) || ' ' || search_steps)"
)

TRIGGERS = """
CREATE OR REPLACE FUNCTION ledger_step_search_words() RETURNS trigger AS $$
BEGIN
    -- An INSERT into a side table, never an UPDATE of ledger_run: the step's writer holds the
    -- run row FOR SHARE, and the parallel steps of one fan-out each hold it too, so upgrading
    -- that lock here deadlocks them. ledger.transitions.search.fold_search_words (the sweep)
    -- moves these words into ledger_run.search_steps.
    INSERT INTO ledger_runsearchdelta (run_id, words)
    VALUES (NEW.run_id,
            NEW.step_id || ' ' || coalesce(NEW.effect_key, '') || ' ' || left(NEW.error, 200));
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER ledger_step_search_insert AFTER INSERT ON ledger_step
    FOR EACH ROW WHEN (NEW.kind = 'effect' OR NEW.error <> '')
    EXECUTE FUNCTION ledger_step_search_words();
CREATE TRIGGER ledger_step_search_update AFTER UPDATE OF error, effect_key ON ledger_step
    FOR EACH ROW
    WHEN ((NEW.kind = 'effect' OR NEW.error <> '')
          AND (NEW.error IS DISTINCT FROM OLD.error
               OR NEW.effect_key IS DISTINCT FROM OLD.effect_key))
    EXECUTE FUNCTION ledger_step_search_words();
UPDATE ledger_run r SET search_steps = s.words
  FROM (SELECT run_id,
               left(string_agg(' ' || step_id || ' ' || coalesce(effect_key, '') || ' '
                               || left(error, 200), '' ORDER BY seq), 4000) AS words
          FROM ledger_step WHERE kind = 'effect' OR error <> '' GROUP BY run_id) s
 WHERE r.run_id = s.run_id;
"""

DROP_TRIGGERS = """
DROP TRIGGER IF EXISTS ledger_step_search_insert ON ledger_step;
DROP TRIGGER IF EXISTS ledger_step_search_update ON ledger_step;
DROP FUNCTION IF EXISTS ledger_step_search_words();
"""


def _has_trgm(schema_editor: Any) -> bool:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'")
        return cursor.fetchone() is not None


def _create(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    trgm = _has_trgm(schema_editor)
    # The old title index goes first: the fold below rewrites the runs with effect or failed
    # steps, and every index on ledger_run takes each new row version.
    schema_editor.execute("DROP INDEX IF EXISTS run_title_trgm")
    schema_editor.execute(TRIGGERS)
    if trgm:
        schema_editor.execute(
            f"CREATE INDEX run_search_trgm ON ledger_run USING gin (({DOC}) gin_trgm_ops)"
        )
        # The expression's statistics: without them the planner takes every word for a rare
        # one and sorts all the matches of a common word instead of walking the newest runs.
        schema_editor.execute("ANALYZE ledger_run")


def _drop(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(DROP_TRIGGERS)
    schema_editor.execute("DROP INDEX IF EXISTS run_search_trgm")
    if _has_trgm(schema_editor):
        schema_editor.execute(
            "CREATE INDEX IF NOT EXISTS run_title_trgm ON ledger_run "
            "USING gin (UPPER(title) gin_trgm_ops)"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0017_status_counts"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="search_steps",
            field=models.TextField(
                blank=True,
                db_default="",
                default="",
                editable=False,
                help_text="Kept by triggers: ids, effect keys and errors of the run's effect "
                "and failed steps, for the word search.",
            ),
        ),
        migrations.CreateModel(
            name="RunSearchDelta",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("run_id", models.CharField(max_length=64, db_index=True)),
                ("words", models.TextField()),
            ],
        ),
        migrations.RunPython(_create, _drop),
    ]
