"""Transitional: the REST API serializers moved to `tenants.api.rule_serializers` (git mv, so that
history follows them); the commit after this one splits them by sub-domain and brings the base
back."""

from tenants.api.rule_serializers import *  # noqa: F403
