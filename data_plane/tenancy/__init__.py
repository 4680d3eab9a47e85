"""Tenancy in the broker: who may connect, publish and subscribe, read from the control plane's
tables (psycopg, async) and kept fresh by its NOTIFY channel. No Django import here."""
