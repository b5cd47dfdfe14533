"""What flows out: the core's ports made real (bind, Events, evictions, nominations) and the PreBinds of claims and
volumes."""
