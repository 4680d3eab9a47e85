"""What the planes and the jobs agree on, written once: the tables other planes
read and write (`tables`), the control plane's NOTIFY channel to the broker
(`notifications`), the quota keys (`quota_keys`) and the shape of a rule's actions
(`rule_actions`)."""
