"""Billing tests share the suite's one local SparkSession (`spark`, tests/conftest.py)."""
