"""Device shadows on AWS IoT's reserved topics, served by the broker beside its router.

A device's PUBLISH to `$aws/things/{thing}/shadow[/name/{shadow}]/{get,update,delete}` is not
routed: admission hands it to the broker's `Shadows` port (`ports.Shadows`), this package's
`ShadowService`, which answers on `…/accepted` and `…/rejected` and tells every subscriber on
`…/update/delta` and `…/update/documents` through the ordinary publish path (so subscribers on
any node get them, metered and journeyed like any message). The semantics are AWS's
(`common.shadow`); the ACL decides who may touch which thing's shadow (`common.access.acl`: its own,
unless a rule grants more).

- `service`: requests in, replies out; at most 10 in flight per client, as AWS (429 beyond);
- `batches`: requests gathered while the previous batch commits, in arrival order;
- `store`: the shadows in Postgres (one transaction per batch, rows locked in id order, history
  rows beside them; `tenants.models.Shadow`), or in memory for a broker without a database;
- `announcements`: changes the REST API made, published by one broker of the cluster.
"""
