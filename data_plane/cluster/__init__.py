"""The broker cluster on Redis: many broker processes (workers of one machine, or machines)
acting as one broker. Importing the broker, never imported by it: the broker sees a `Cluster`
port (data_plane.broker.ports) given to it at construction, or nothing (one process, no bus).

- `node`: membership (heartbeat keys with a TTL), this node's routes, receiving;
- `routes`: the route table (tenant, filter) → nodes, EMQX's merge semantics;
- `forward`: a publish once to each other node with a matching route, batched, on streams;
- `codec`: forwarded messages as bytes.

Not yet (issue 17, points 2-5), and how it will go:

- Shared subscriptions are routed like plain ones, so a group with members on several nodes
  gets one copy per node, not one per cluster. The table already knows groups per node
  (`$share` routes carry the group); the publishing node will pick one node per (filter,
  group) among the live ones with that route, local included, and forward a delivery that names
  the groups the receiver serves.
- Sessions across nodes: a session is owned by the node its client is connected to, recorded
  in Redis as `session:{tenant}:{client id}` → node, taken with SET (not NX) returning the old
  owner (`SET … GET`). A CONNECT at node B writes itself as owner first; if the answer names
  node A, B asks A over A's stream to close that client with 0x8E and to hand over (A
  persists the session to Postgres, answers on B's stream); B then restores it from Postgres
  and only then sends CONNACK (session present). Two CONNECTs with one client id at two workers
  at once are ordered by that single Redis command: the loser is taken over by the winner, so
  one session remains. Wills follow MQTT 5 §3.1.2.5: the takeover publishes nothing unless the
  new CONNECT has Clean Start (the old session ends) — A does that before answering. Wills of a
  dead node's clients: survivors see its heartbeat gone, and one (the purge lock's holder)
  loads that node's persisted sessions' wills from Postgres and schedules them after their
  delay, unless the client reconnects first (which clears `will_due` in Postgres).
- Cluster-wide limits: counters in Redis (INCR with expiry per window), a local allowance
  leased in slices so the hot path stays local.
"""

from data_plane.cluster.node import Cluster

__all__ = ["Cluster"]
