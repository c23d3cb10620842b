"""The transport room: how rtforge reaches a machine and what it learns of it.

A transport runs argv on this machine or on a board over SSH; a board is a
transport plus the root its files live under.  Every other room of device/
works through these; this room imports no other.
"""
