"""The broker cluster on Redis: many broker processes (workers of one machine, or machines)
acting as one broker. Importing the broker, never imported by it: the broker sees a `Cluster`
port (data_plane.broker.ports) given to it at construction, or nothing (one process, no bus).

- `node`: membership (heartbeat keys with a TTL), this node's routes, receiving;
- `routes`: the route table (tenant, filter) → nodes, EMQX's merge semantics;
- `forward`: a publish once to each other node with a matching route, batched, on streams;
- `codec`: forwarded messages as bytes;
- `sessions`: one session per client id across the cluster (takeover between nodes; a
  persistent session moves with its client through Postgres), and at start-up each stored
  persistent session restored by one node only (no owner, or a dead one);
- `inherit`: a survivor taking a dead node's place (its persistent sessions adopted, its
  stream's unacknowledged messages delivered into them once — entries the dead node's last
  commit covered are skipped —, its clients' wills published);
- `relay`: while a persistent session moves, the old node relays what still reaches it to the
  new one until the new node's routes stand (no moment without a route);
- `wills`: the wills of clients not kept in Postgres, in Redis under their node;
- `limits`: a tenant's limits across the nodes: max connections exact, rates on leases of
  token buckets in Redis, `$SYS` figures summed over the nodes;
- `regroup`: a dead node's share of shared-group messages, given to a surviving member;
- `exactly`: exactly once while a session moves (a message that reaches the new node both
  directly and through the relay is delivered once, by its origin).
"""

from data_plane.cluster.node import Cluster

__all__ = ["Cluster"]
