"""AWS IoT Jobs on the reserved topics `$aws/things/{thing}/jobs/…`, served by the broker beside
its router, as the device shadows are (`data_plane.shadows`).

A device's PUBLISH to `…/jobs/get`, `…/jobs/start-next`, `…/jobs/{jobId}/get` or
`…/jobs/{jobId}/update` is not routed: admission hands it to the broker's reserved-topics port
(`reserved.ReservedServices`, which holds the shadow service and this one), and `service`
answers on `…/accepted` or `…/rejected` and tells the thing's subscribers on `…/jobs/notify` and
`…/jobs/notify-next` when its pending executions changed, through the ordinary publish path.
The semantics and documents are AWS's (`common.jobs`); the ACL decides who may touch which
thing's jobs (`common.access.acl`: its own, unless a rule grants more).

- `service`: requests in, replies out; a thing's requests one after another, at most 10 in
  flight per client (AWS's `RequestThrottled` beyond);
- `store`: the executions in Postgres (`tenants.models.JobExecution`), a request in one
  transaction holding the thing's execution rows locked;
- `announcements`: notifications of changes the control plane made (jobs created or
  cancelled, executions timed out), published by one broker of the cluster;
- `reserved`: the one port admission asks, dispatching to shadows or jobs by topic.
"""
