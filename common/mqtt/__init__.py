"""Sans-IO MQTT 3.1.1 / 5.0: packet classes (`packets`), reason codes, and the codec."""
