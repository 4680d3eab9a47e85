"""AWS IoT Device Shadows, as AWS documents them: the reserved topics (`topics`) and the documents
(`document`: requests, merging with `null` deletes, per-field metadata, version checks, delta, and
the accepted / rejected / delta / documents replies with AWS's error bodies).

Sans-IO and shared: the broker's shadow service (`data_plane.shadows`) answers devices on MQTT with
it, the control plane's REST API (`tenants.shadows.services`) answers applications with it, so a
shadow behaves the same whichever door a change comes through.
"""
