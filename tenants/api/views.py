"""Transitional: the REST API views moved to `tenants.api.rule_views` (git mv, so that history
follows them); the commit after this one splits them by sub-domain and brings the base back."""

from tenants.api.rule_views import *  # noqa: F403
