"""The multiplexing core: yamux-compatible framing, the trio session, transports and helpers."""
