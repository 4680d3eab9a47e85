"""The portal's side navigation, defined once: a page links itself in by one entry in `PAGES`
(its group, its label, its URL name). `base.html` renders it through `{% portal_nav %}`
(`tenants.templatetags.portal_nav`), grouped in the order the groups first appear here, with the
current page marked `aria-current="page"`."""

from __future__ import annotations

from dataclasses import dataclass

from django.urls import NoReverseMatch, reverse


@dataclass(frozen=True)
class NavPage:
    group: str  # "" for the pages above every group (dashboard, getting started)
    label: str
    url_name: str
    who: str = "member"  # member (a tenant's, any role), owner, staff, superuser


PAGES: list[NavPage] = [
    NavPage("", "Dashboard", "portal:dashboard"),
    NavPage("", "Get started", "portal:onboarding"),
    NavPage("Devices", "Devices", "portal:devices"),
    NavPage("Devices", "Certificates & keys", "portal:identity"),
    NavPage("Devices", "Device certificates", "portal:certificates"),
    NavPage("Devices", "ACLs", "portal:acls"),
    NavPage("Devices", "Device groups", "portal:groups"),
    NavPage("Devices", "Jobs", "portal:jobs"),
    NavPage("Devices", "Fleet provisioning", "portal:provisioning"),
    NavPage("Data", "Rules", "portal:rules"),
    NavPage("Data", "Sinks", "portal:sinks"),
    NavPage("Data", "History", "portal:history"),
    NavPage("Data", "Journey", "portal:journey"),
    NavPage("Data", "Live", "portal:live"),
    NavPage("Data", "MQTT client", "portal:client"),
    NavPage("Data", "Sessions", "portal:sessions"),
    NavPage("Data", "Retained", "portal:retained"),
    NavPage("Data", "Topics", "portal:topics"),
    NavPage("Data", "Shared groups", "portal:shared-groups"),
    NavPage("Data", "Alarms", "portal:alarms"),
    NavPage("Data", "Alarm definitions", "portal:alarm-definitions"),
    NavPage("Plan & billing", "Usage", "portal:usage"),
    NavPage("Plan & billing", "Budget", "portal:budget"),
    NavPage("Plan & billing", "Invoices", "portal:invoices"),
    NavPage("Plan & billing", "Plan & quotas", "portal:quota"),
    NavPage("Settings", "Members", "portal:members"),
    NavPage("Settings", "API tokens", "portal:tokens"),
    NavPage("Settings", "Audit log", "portal:audit", who="owner"),
    NavPage("Settings", "Billing details", "portal:billing-details"),
    NavPage("Platform", "Operator", "portal:operator", who="staff"),
    NavPage("Platform", "Admin", "admin:index", who="superuser"),
]


@dataclass(frozen=True)
class NavLink:
    label: str
    url: str
    current: bool


def _shown(page: NavPage, user, membership) -> bool:
    if page.who == "staff":
        return bool(user.is_staff)
    if page.who == "superuser":
        return bool(user.is_superuser)
    # An operator with no tenant of their own gets the operators' links only.
    if membership is None:
        return False
    return page.who == "member" or membership.role == page.who


def _current(url: str, path: str) -> bool:
    return path == url if url == "/" else path.startswith(url)


def navigation(path: str, user, membership) -> list[tuple[str, list[NavLink]]]:
    """The groups and links `user` may follow, the one `path` is under marked current (the
    longest match: /devices/x/ is under Devices, /billing/details/ under Billing details)."""
    shown: list[tuple[NavPage, str]] = []
    for page in PAGES:
        if not _shown(page, user, membership):
            continue
        try:
            shown.append((page, reverse(page.url_name)))
        except NoReverseMatch:  # a page whose app is not installed here (the admin)
            continue
    matches = [url for _, url in shown if _current(url, path)]
    current = max(matches, key=len, default=None)
    groups: dict[str, list[NavLink]] = {}
    for page, url in shown:
        groups.setdefault(page.group, []).append(NavLink(page.label, url, url == current))
    return list(groups.items())
