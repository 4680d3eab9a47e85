"""Login throttles keyed on what the client cannot forge: its address as the TCP peer saw it
(`REMOTE_ADDR`), and the account it tries.

`X-Forwarded-For` is the client's own text, so it is believed only when the peer is one of the
configured `TRUSTED_PROXIES` (addresses or networks: the deployment's load balancers); then the
client is the right-most address in it that is not itself a trusted proxy. Each attempt counts,
as DRF's throttles do, in the default cache (one sliding window per key).

Logins count against three keys. The address (`AUTH_THROTTLE_RATE`): one client's guesses,
whatever accounts they try. The (account, address) pair (`AUTH_ACCOUNT_THROTTLE_RATE`): guesses
at one account from one place. And the account itself, at the same rate, but only for addresses
it has not logged in from lately (`tenants.accounts.trust`): a botnet's guesses from everywhere share
one budget, while the owner, from where they usually log in, keeps logging in with the right
password however many wrong ones arrive from elsewhere (Microsoft's "smart lockout": familiar
and unfamiliar locations). An attempt refused by one key is not counted against the next.

Password resets: per address (`PASSWORD_RESET_THROTTLE_RATE`) and per account named
(`PASSWORD_RESET_ACCOUNT_RATE`), silently: the answer is the same whether a mail went or not.

Used by the API's signup/token views (DRF throttle classes below) and the portal's login, signup
and password reset.
"""

from __future__ import annotations

import hashlib
import time

from django.conf import settings
from django.core.cache import cache
from rest_framework.throttling import BaseThrottle

from tenants.accounts import trust as accounts
from tenants.client_address import client_address

_DURATIONS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_rate(rate: str) -> tuple[int, int]:
    """`20/min` → (20, 60)."""
    count, _, period = rate.partition("/")
    return int(count), _DURATIONS[period.strip()[:1]]


def hit(scope: str, key: str, rate: str) -> float:
    """Count an attempt under (scope, key); 0.0 when allowed, else seconds until it would be."""
    limit, period = parse_rate(rate)
    cache_key = f"throttle:{scope}:{hashlib.sha256(key.encode()).hexdigest()}"
    now = time.time()
    history = [t for t in cache.get(cache_key, []) if t > now - period]
    if len(history) >= limit:
        return max(0.0, history[0] + period - now)
    history.append(now)
    cache.set(cache_key, history, period)
    return 0.0


def address_rate() -> str:
    return getattr(settings, "AUTH_THROTTLE_RATE", "20/min")


def account_rate() -> str:
    return getattr(settings, "AUTH_ACCOUNT_THROTTLE_RATE", "10/min")


def login_wait(meta: dict, email: str | None) -> float:
    """Count one login/signup attempt (module docstring): 0.0 when allowed, else the seconds to
    wait."""
    address = client_address(meta)
    wait = hit("auth-address", address, address_rate())
    if wait or not email:
        return wait
    account = email.strip().lower()
    wait = hit("auth-account-address", f"{account}\n{address}", account_rate())
    if wait or accounts.login_address_known(account, address):
        return wait
    return hit("auth-account", account, account_rate())


def remember_login(sender, request, user, **kwargs) -> None:
    """`user_logged_in`: the address becomes one of the account's usual ones."""
    meta = getattr(request, "META", None)
    if meta:
        accounts.login_address_remember(user, client_address(meta))


def reset_allowed(meta: dict, email: str) -> bool:
    """May a password-reset mail go to `email` on this request? Counted per address, then per
    account; the caller answers the same either way (no hint of accounts or limits)."""
    address_rate_ = getattr(settings, "PASSWORD_RESET_THROTTLE_RATE", "10/h")
    if hit("reset-address", client_address(meta), address_rate_):
        return False
    account_rate_ = getattr(settings, "PASSWORD_RESET_ACCOUNT_RATE", "3/h")
    return not hit("reset-account", (email or "").strip().lower(), account_rate_)


def connect_signals() -> None:
    from django.contrib.auth.signals import user_logged_in

    user_logged_in.connect(remember_login, dispatch_uid="throttles-remember-login")


class LoginThrottle(BaseThrottle):
    """DRF: the address and the account named in the body (`email`)."""

    def allow_request(self, request, view) -> bool:
        email = request.data.get("email") if hasattr(request.data, "get") else None
        self._wait = login_wait(request.META, email if isinstance(email, str) else None)
        return not self._wait

    def wait(self) -> float | None:
        return self._wait or None
