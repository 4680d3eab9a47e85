"""Jobs and device groups: writes, reads, artifacts, metering."""
