"""The broker's ACL evaluation lives in `common.acl` (pure, no I/O), so the control plane's ACL
tester answers with the very same code; re-exported here under the broker's old names."""

from common.acl import (  # noqa: F401
    PUBLISH,
    SUBSCRIBE,
    AclEntry,
    AclPolicy,
    expand,
    filter_covers,
    filter_matches,
    filters_intersect,
)
