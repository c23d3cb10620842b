"""The tune room: apply doctor's fixes reversibly.

The operations plan from a snapshot, the engine writes, reads back and
reverts; the kernel command line words are tried once at a reboot through
deploy's try-once template.  It may use every other room of device/.
"""
