"""The deploy room: change what a target boots without ever bricking it.

The try-once template (tryonce, steps), its two boot loaders' mechanisms
(the Pi firmware's tryboot, GRUB's grub-reboot), the payloads they try (a
kernel bundle, a kernel .deb, Raspberry Pi's RT package, a kernel command
line), the bundle itself, and the kernels a Pi holds.  It may use the
firmware and transport rooms.
"""
