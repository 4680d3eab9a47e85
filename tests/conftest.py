"""Shared fixtures. The database is a throwaway embedded cluster (control_plane.pytest_plugin)."""
