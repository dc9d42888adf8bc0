"""What more than one driver (and the ADB device side) needs: no driver's insides.

`logbuffer` (the device log ring), `packages` (reading an APK's or an IPA's identity) and
`ports` (device sockets: `ListeningSocket`, `PortHandler`). Siblings share through here, as
trio's ``_core`` serves the rest of trio: ``virtual`` and ``emulator`` never import each other.
"""
