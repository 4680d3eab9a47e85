"""The broker cluster on Redis: many broker processes (workers of one machine, or machines)
acting as one broker. Importing the broker, never imported by it: the broker sees a `Cluster`
port (data_plane.broker.ports) given to it at construction, or nothing (one process, no bus).

- `node`: the `Cluster` port the server plugs in, a thin composition of the rooms below: it
  builds each with what it uses (no room reaches another through the node) and registers who
  follows what membership announces;
- `bus`: what the rooms share: the node on the bus (`Bus`: id, Redis, keys, heartbeat, control
  messages), the `Peers` view of who lives, the `Drop` counter;
- `keys`: where the cluster keeps things in Redis (every key and channel name);
- `membership`: the heartbeat (keys with a TTL), the others' liveness (it owns `alive` and
  `dying`, and announces changes: versions to load, a dead node's place to take, this node
  counted dead), joining and leaving, no new clients while cut off from the bus (a
  `client.redirect` hook of the broker's);
- `routes`: the route table (tenant, filter) → nodes, EMQX's merge semantics;
- `own_routes`: this node's route set in Redis (the router's changes as versioned deltas);
- `their_routes`: the other nodes' route sets into the table (the route channel, reloads);
- `publish`: the port's publish: routed here, and once to each node with a matching route
  (one node per shared group: among the nodes with members, else the first node whose holder
  keeps the group — `router.HELD` routes); and `hand_held`, a holder's kept messages to a node
  where the group has members;
- `fences`: a replay's cut at every node — each answers, once it knows the replay's route, with
  the next millisecond of its clock, its count of publishes and its archive writer, after its
  archive holds what it routed before (data_plane.broker.replay reads and drops by them);
- `handover`: a shared group's first member at a node gets what other nodes' holders kept
  first: a fence, then an ask on each holder's stream, answered after its last kept copy (the
  member's holder keeps the live messages meanwhile);
- `forward`: the copies for other nodes, batched on their streams, with back-pressure;
- `receive`: this node's stream read through its consumer group and delivered here;
- `backpressure`: a backed-up subscriber slows publishers on other nodes too (the stream reader
  held by the sessions it backs up; a destination whose stream backs up holds the publishers
  forwarding to it), each hold bounded by the read gate's allowance;
- `codec`: forwarded messages as bytes;
- `node_metrics`: the node's /metrics;
- `affinity`: tenant-affine workers: each tenant's home among this machine's workers, where
  the landing worker hands a client at CONNECT (`data_plane.broker.landing`, `handover`);
- `sessions`: one session per client id across the cluster (takeover between nodes; a
  persistent session moves with its client through Postgres), and at start-up each stored
  persistent session restored by one node only (no owner, or a dead one);
- `inherit`: a survivor taking a dead node's place (its persistent sessions adopted, its
  stream's unacknowledged messages delivered into them once — entries the dead node's last
  commit covered are skipped —, its clients' wills published);
- `relay`: while a persistent session moves, the old node relays what still reaches it to the
  new one until the new node's routes stand (no moment without a route);
- `departed`: relays that left the router, kept a moment for what other nodes sent before they
  knew (and relayed messages for a session that moved on again);
- `deliver`: a message delivered to some sessions only (a relayed copy, a dead node's stream);
- `wills`: the wills of clients not kept in Postgres, in Redis under their node;
- `limits`: a tenant's limits across the nodes, a thin composition of the four rooms below
  (their life, the tick they run on, their /metrics);
- `connection_counts`: max connections exact (one Redis script admits a CONNECT over the live
  nodes' counts), and the node's marker that says which counts and leases are live;
- `leases`: rates as token buckets in Redis that the nodes lease from once a tick;
- `leased_buckets`: the tokens a node holds, spent without Redis by the broker's hot path;
- `sys_figures`: the tenants' `$SYS` figures summed over the nodes;
- `regroup`: a dead node's share of shared-group messages, given to a surviving member;
- `exactly`: exactly once while a session moves (a message that reaches the new node both
  directly and through the relay is delivered once, by its origin, which travels on the
  message; the window opens from the broker's `session.adopted` hook and is the session's
  `screen`).

The rooms steer the broker through its hooks and methods (`Broker.keep`, `let_go`,
`publish_will`, a connection's `taken_over`), never its maps or private attributes.

Who calls whom (no loop): `membership` → `own_routes`; `their_routes` and `inherit` hear from
`membership` through what it announces (registered in `node`) and tell it what they see through
the narrow views they are given; `receive` → `sessions` → `relay` → `departed`; `inherit` →
`sessions`, `wills`, `own_routes`, `regroup`; `publish` and `relay` → `forward`.
"""

from data_plane.cluster.node import Cluster

__all__ = ["Cluster"]
