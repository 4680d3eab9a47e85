"""Device shadows: writes and reads."""
