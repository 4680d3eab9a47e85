"""Tenants' rules on Spark: one plan (`plan.rule_outputs`), two modes (`live`, `backfill`)."""
