"""Shadow documents as AWS IoT's Device Shadow service reads and writes them.

A shadow is `state` (`desired`, `reported`: JSON objects, each absent when empty), `metadata`
(the same shape, `{"timestamp": epoch seconds}` at each leaf: when that field was last set), and
`version` (increases by one with every accepted update; a deleted shadow keeps it, so one created
again under the same name goes on from there).

An update merges its `state` into the shadow: objects recursively, anything else (arrays too)
replaced whole, `null` deleting a field (a section set to `null` deletes the section; `"state":
null` clears both). A request that names a `version` is refused with 409 unless it is the
shadow's. The `delta` is what `desired` wants that `reported` does not say.

Requests are refused with AWS's codes and words (`ShadowError`; `error_document` is the body
published on `…/rejected`):

| code | message |
|------|---------|
| 400 | Invalid JSON (`Invalid JSON: …` naming NaN/Infinity, a NUL or a lone surrogate) · Missing required node: state · State node must be an object · Desired node must be an object · Reported node must be an object · Invalid version · Invalid clientToken · JSON contains too many levels of nesting; maximum is 6 · State contains an invalid node |
| 404 | Thing not found · No shadow exists with name: '…' |
| 409 | Version conflict |
| 413 | The payload exceeds the maximum size allowed |
| 415 | Unsupported documented encoding; supported encoding is UTF-8 |
| 429 | Too Many Requests |
| 500 | Internal service failure |

(401 and 403 are AWS's answers to what its policies forbid; here the ACL refuses such a PUBLISH
itself, 0x87 on MQTT 5, and the REST API answers 404 for what the caller cannot see.)
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from common import json_input

DEFAULT_MAX_SIZE = 8192  # bytes of a shadow's state (desired + reported), as AWS
MAX_CLIENT_TOKEN_BYTES = 64
MAX_DEPTH = 6  # levels of nesting inside `desired` or `reported`
SECTIONS = ("desired", "reported")

INVALID_JSON = "Invalid JSON"
TOO_LARGE = "The payload exceeds the maximum size allowed"
TOO_DEEP = f"JSON contains too many levels of nesting; maximum is {MAX_DEPTH}"
UNSUPPORTED_ENCODING = "Unsupported documented encoding; supported encoding is UTF-8"


class ShadowError(Exception):
    """A refused request: `code` (HTTP's, as AWS) and AWS's message."""

    def __init__(self, code: int, message: str, client_token: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.client_token = code, message, client_token


def version_conflict(client_token: str | None = None) -> ShadowError:
    return ShadowError(409, "Version conflict", client_token)


def not_found(thing: str, shadow: str, client_token: str | None = None) -> ShadowError:
    return ShadowError(404, f"No shadow exists with name: '{shadow or thing}'", client_token)


def thing_not_found(client_token: str | None = None) -> ShadowError:
    return ShadowError(404, "Thing not found", client_token)


def too_many_requests(client_token: str | None = None) -> ShadowError:
    return ShadowError(429, "Too Many Requests", client_token)


def internal_failure(client_token: str | None = None) -> ShadowError:
    return ShadowError(500, "Internal service failure", client_token)


SHADOW_LIMIT = 403  # a new shadow past the tenant's `max_shadows` (AWS's code for a refusal)


def shadow_limit(most: int, client_token: str | None = None) -> ShadowError:
    """A shadow that does not exist yet, refused: the tenant keeps `most` already."""
    return ShadowError(
        SHADOW_LIMIT,
        f"The tenant already has {most} device shadows (max_shadows): delete one first",
        client_token,
    )


# -- requests ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Request:
    """A parsed request: `state` is the update's state node (None: `"state": null`, clear it all;
    absent for get and delete), `version` the precondition if any."""

    operation: str
    client_token: str | None = None
    version: int | None = None
    state: dict[str, Any] | None = None
    clear: bool = False  # "state": null


def parse_request(operation: str, payload: bytes, max_size: int = DEFAULT_MAX_SIZE) -> Request:
    """Read a request's payload, or raise ShadowError with AWS's code and words. A get or delete
    may have an empty payload (AWS ignores the body; the SDK sends its clientToken)."""
    if len(payload) > max_size:
        raise ShadowError(413, "The payload exceeds the maximum size allowed")
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        raise ShadowError(
            415, "Unsupported documented encoding; supported encoding is UTF-8"
        ) from None
    if operation != "update" and not text.strip():
        return Request(operation)
    try:  # NaN, NUL, lone surrogates, deep nesting: refused before they reach a shared batch
        body = json_input.loads(text, max_depth=MAX_DEPTH + 2)  # + the state and its section
    except json_input.Refused as refused:
        raise ShadowError(400, _invalid(refused.reason)) from None
    if not isinstance(body, dict):
        raise ShadowError(400, INVALID_JSON)
    token = body.get("clientToken")
    if token is not None and (
        not isinstance(token, str) or len(token.encode()) > MAX_CLIENT_TOKEN_BYTES
    ):
        raise ShadowError(400, "Invalid clientToken")
    version = body.get("version")
    if version is not None and (type(version) is not int or version < 0):
        raise ShadowError(400, "Invalid version", token)
    request = Request(operation, token, version)
    if operation != "update":
        return request
    if "state" not in body:
        raise ShadowError(400, "Missing required node: state", token)
    state = body["state"]
    if state is None:
        request.clear = True
        return request
    if not isinstance(state, dict):
        raise ShadowError(400, "State node must be an object", token)
    for key, value in state.items():
        if key not in SECTIONS:
            raise ShadowError(400, "State contains an invalid node", token)
        if value is not None and not isinstance(value, dict):
            raise ShadowError(400, f"{key.capitalize()} node must be an object", token)
        if value is not None:
            if _depth(value) > MAX_DEPTH:
                raise ShadowError(400, TOO_DEEP, token)
            if _null_in_array(value):  # AWS: arrays cannot hold null
                raise ShadowError(400, "State contains an invalid node", token)
    request.state = state
    return request


def _invalid(reason: str) -> str:
    """AWS's words for JSON it cannot read, and what it was (`json_input`'s reason)."""
    if reason.startswith("nested"):
        return TOO_DEEP
    return INVALID_JSON if reason == json_input.NOT_JSON else f"{INVALID_JSON}: {reason}"


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _null_in_array(value: Any, in_array: bool = False) -> bool:
    if value is None:
        return in_array
    if isinstance(value, dict):
        return any(_null_in_array(v) for v in value.values())
    if isinstance(value, list):
        return any(_null_in_array(v, True) for v in value)
    return False


# -- the shadow -------------------------------------------------------------------------------


@dataclass(slots=True)
class Shadow:
    """A shadow as stored: `present` False for one never created or deleted (its `version`
    stays, so one created again goes on from it)."""

    version: int = 0
    state: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    present: bool = False

    def copy(self) -> Shadow:
        return Shadow(
            self.version, copy.deepcopy(self.state), copy.deepcopy(self.metadata), self.present
        )


@dataclass(slots=True)
class Outcome:
    """What an accepted update did: the shadow before and after, and the replies' bodies (each a
    dict; `delta` None when desired and reported agree)."""

    before: Shadow
    after: Shadow
    accepted: dict[str, Any]
    documents: dict[str, Any]
    delta: dict[str, Any] | None


def state_size(state: dict[str, Any]) -> int:
    """Bytes of a state as AWS counts them against the size limit: desired and reported as
    compact JSON (metadata is not counted)."""
    return len(dumps(state)) if state else 2


# One encoder for every document (compact, UTF-8 as sent): `json.dumps` built one per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def dumps(value: Any) -> bytes:
    return _ENCODER.encode(value).encode()


def update(shadow: Shadow, request: Request, now: int, max_size: int = DEFAULT_MAX_SIZE) -> Outcome:
    """Apply an update request to `shadow` (left as it was): the new shadow and the replies, or
    ShadowError (409 on a stale version, 413 when the state would outgrow `max_size`)."""
    token = request.client_token
    if request.version is not None and request.version != shadow.version:
        raise version_conflict(token)
    # Copy on write: the levels an update changes are copied, the rest is shared with `shadow`
    # (never changed in place: a deep copy per update cost more than the merge itself).
    after = Shadow(shadow.version + 1, {}, {}, True)
    if shadow.present:
        after.state, after.metadata = dict(shadow.state), dict(shadow.metadata)
    stamp = {"timestamp": now}
    if request.clear:
        after.state, after.metadata = {}, {}
        sent: dict[str, Any] | None = None
    else:
        sent = request.state or {}
        for section, value in sent.items():
            if value is None:
                after.state.pop(section, None)
                after.metadata.pop(section, None)
                continue
            merged_state = dict(after.state.get(section) or {})
            merged_meta = dict(after.metadata.get(section) or {})
            _merge(merged_state, merged_meta, value, stamp)
            _set_or_drop(after.state, section, merged_state)
            _set_or_drop(after.metadata, section, merged_meta)
    if state_size(after.state) > max_size:
        raise ShadowError(413, TOO_LARGE, token)
    accepted: dict[str, Any] = {
        "state": sent,
        "metadata": _stamps(sent, now) if sent is not None else None,
        "version": after.version,
        "timestamp": now,
    }
    if request.clear:
        accepted["state"] = None
        accepted.pop("metadata")
    _with_token(accepted, token)
    return Outcome(
        shadow,
        after,
        accepted,
        documents_document(shadow if shadow.present else None, after, now, token),
        delta_document(after, now, token),
    )


def _merge(
    state: dict[str, Any], metadata: dict[str, Any], changes: dict[str, Any], stamp: dict[str, Any]
) -> None:
    """Merge `changes` into `state` (and its `metadata`), both fresh copies of one level, in
    place: objects recursively (each level copied before it changes), other values replaced
    whole, `null` deleting; objects left empty by deletions go too."""
    for key, value in changes.items():
        if value is None:
            state.pop(key, None)
            metadata.pop(key, None)
        elif isinstance(value, dict):
            inner = state.get(key)
            inner_meta = metadata.get(key)
            if not isinstance(inner, dict):
                inner, inner_meta = {}, {}
            else:
                inner = dict(inner)
                if not isinstance(inner_meta, dict) or _is_leaf(inner_meta):
                    inner_meta = {}
                else:
                    inner_meta = dict(inner_meta)
            _merge(inner, inner_meta, value, stamp)
            _set_or_drop(state, key, inner)
            _set_or_drop(metadata, key, inner_meta)
        else:
            state[key] = value
            metadata[key] = dict(stamp)


def _is_leaf(metadata: dict[str, Any]) -> bool:
    """A leaf's metadata (`{"timestamp": t}`), not an object's (whose field may be named so)."""
    return len(metadata) == 1 and type(metadata.get("timestamp")) is int


def _set_or_drop(parent: dict[str, Any], key: str, value: dict[str, Any]) -> None:
    if value:
        parent[key] = value
    else:
        parent.pop(key, None)


def _stamps(value: Any, now: int) -> Any:
    """Metadata for the fields of a request: its shape, a timestamp at each leaf (nulls too)."""
    if isinstance(value, dict) and value:
        return {key: _stamps(inner, now) for key, inner in value.items()}
    return {"timestamp": now}


def delta(state: dict[str, Any]) -> dict[str, Any]:
    """What `desired` holds that `reported` does not (objects compared field by field; a field
    only in `reported` is no part of it)."""
    return _delta(state.get("desired") or {}, state.get("reported") or {})


def _delta(desired: dict[str, Any], reported: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, wanted in desired.items():
        if key not in reported:
            out[key] = wanted
            continue
        have = reported[key]
        if isinstance(wanted, dict) and isinstance(have, dict):
            inner = _delta(wanted, have)
            if inner:
                out[key] = inner
        elif wanted != have or type(wanted) is not type(have):
            out[key] = wanted
    return out


def _restrict(metadata: Any, shape: Any) -> Any:
    """The part of `metadata` that describes the fields of `shape` (a delta)."""
    if isinstance(shape, dict) and isinstance(metadata, dict) and not _is_leaf(metadata):
        return {key: _restrict(metadata.get(key), value) for key, value in shape.items()}
    return metadata


def _with_token(body: dict[str, Any], token: str | None) -> dict[str, Any]:
    if token is not None:
        body["clientToken"] = token
    return body


# -- replies ----------------------------------------------------------------------------------


def get_document(shadow: Shadow, now: int, token: str | None = None) -> dict[str, Any]:
    """`…/get/accepted`: the whole shadow, its delta beside desired and reported."""
    state = dict(shadow.state)
    difference = delta(shadow.state)
    if difference:
        state["delta"] = difference
    body = {
        "state": state,
        "metadata": shadow.metadata,
        "version": shadow.version,
        "timestamp": now,
    }
    return _with_token(body, token)


def delta_document(shadow: Shadow, now: int, token: str | None = None) -> dict[str, Any] | None:
    """`…/update/delta`: what desired wants that reported does not say, with desired's
    metadata of those fields; None when they agree."""
    difference = delta(shadow.state)
    if not difference:
        return None
    body = {
        "version": shadow.version,
        "timestamp": now,
        "state": difference,
        "metadata": _restrict(shadow.metadata.get("desired", {}), difference),
    }
    return _with_token(body, token)


def _snapshot(shadow: Shadow) -> dict[str, Any]:
    return {"state": shadow.state, "metadata": shadow.metadata, "version": shadow.version}


def documents_document(
    before: Shadow | None, after: Shadow, now: int, token: str | None = None
) -> dict[str, Any]:
    """`…/update/documents`: the shadow before (None when it did not exist) and after."""
    body = {
        "previous": _snapshot(before) if before is not None else None,
        "current": _snapshot(after),
        "timestamp": now,
    }
    return _with_token(body, token)


def delete_document(version: int, now: int, token: str | None = None) -> dict[str, Any]:
    """`…/delete/accepted`: the version the shadow had (a new one goes on from it)."""
    return _with_token({"version": version, "timestamp": now}, token)


def error_document(error: ShadowError, now: int) -> dict[str, Any]:
    """`…/rejected`: AWS's error response document."""
    return _with_token(
        {"code": error.code, "message": error.message, "timestamp": now}, error.client_token
    )


def delete(shadow: Shadow, request: Request, thing: str, name: str, now: int) -> Shadow:
    """The shadow once deleted (its version kept), or ShadowError: 404 when there is none,
    409 when the request names another version (an extension: AWS's delete takes none)."""
    if not shadow.present:
        raise not_found(thing, name, request.client_token)
    if request.version is not None and request.version != shadow.version:
        raise version_conflict(request.client_token)
    return Shadow(shadow.version, {}, {}, False)
