"""The broker cluster on Redis: many broker processes (workers of one machine, or machines)
acting as one broker. Importing the broker, never imported by it: the broker sees a `Cluster`
port (data_plane.broker.ports) given to it at construction, or nothing (one process, no bus).

- `node`: membership (heartbeat keys with a TTL), this node's routes, receiving;
- `routes`: the route table (tenant, filter) → nodes, EMQX's merge semantics;
- `forward`: a publish once to each other node with a matching route, batched, on streams;
- `codec`: forwarded messages as bytes;
- `sessions`: one session per client id across the cluster (takeover between nodes), and at
  start-up each stored persistent session restored by one node only (no owner, or a dead one);
- `limits`: a tenant's limits across the nodes: max connections exact, rates on leases of
  token buckets in Redis, `$SYS` figures summed over the nodes.

Not yet (issue 17, points 3-5), and how it will go:

- A persistent session moving with its client: after `released`, the claiming node restores
  that one session from Postgres (subscriptions, queue, inbound QoS 2 ids, will) before its
  CONNACK (session present 1); the releasing node saves it and drains its pending commits
  before answering. Until then the new node starts the session afresh.
- A dead node's persistent sessions and wills: the survivor that takes the purge lock claims
  the dead node's sessions (their ownership keys name it), restores them from Postgres and
  schedules their wills after the will delay, unless the client reconnects first.
- A forwarded QoS 1/2 message is acknowledged to its publisher once Redis holds it; a node that
  dies between reading its stream and handing a message to its sessions loses it. Consumer
  groups (XREADGROUP/XACK, XAUTOCLAIM by the survivor) would close that gap.
"""

from data_plane.cluster.node import Cluster

__all__ = ["Cluster"]
