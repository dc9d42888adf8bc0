"""The host daemon: link to the edge, instance supervisor and device drivers."""
