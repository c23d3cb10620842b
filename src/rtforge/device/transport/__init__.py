"""The transport room: how rtforge reaches a machine and what it learns of it.

A transport runs argv on this machine or on a board over SSH (transport.py,
ssh.py; hosts.py: what a HOST argument names); a device is a transport plus
the root its files live under (device.py); what it is -- and whether rtforge
is root there -- is learned in one round trip (facts.py).  Every other room
of device/ works through these; this room imports no other.
"""
