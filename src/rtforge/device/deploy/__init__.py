"""The deploy room: change what a target boots without ever bricking it.

The try-once template (tryonce, steps), its two boot loaders' mechanisms
(the Pi firmware's tryboot: pitry; GRUB's grub-reboot: grubtry), the
payloads they try (a kernel bundle: pibundle; a kernel .deb: deb; Raspberry
Pi's RT package: official; a kernel command line: trycmdline,
grubcmdline), the bundle itself (bundle) and its manifest (manifest: also
what the kernel build writes and the boot test checks), and the kernels a
Pi holds (pikernels).  It may use the firmware and transport rooms.
"""
