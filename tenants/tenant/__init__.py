"""A tenant itself: plan, status, settings, quota overrides."""
