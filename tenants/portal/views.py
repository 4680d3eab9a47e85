"""Transitional: the portal's pages moved to `tenants.portal.rule_views` (git mv, so that history
follows them); the commit after this one splits them by sub-domain and brings the base back."""

from tenants.portal.rule_views import *  # noqa: F403
from tenants.portal.rule_views import (  # noqa: F401
    _context,
    _form_errors,
    _pop_once,
    _show_once,
    _tls_context,
)
