"""What more than one driver (and the ADB device side) needs: no driver's insides.

`logbuffer` (the device log ring), `packages` (reading an APK's or an IPA's identity),
`ports` (device sockets: `ListeningSocket`, `PortHandler`) and `video` (the live view's H.264
encoder tiers). Siblings share through here, as
trio's ``_core`` serves the rest of trio: ``virtual`` and ``emulator`` never import each other.
"""
