"""The firmware room: the Raspberry Pi firmware as rtforge models it.

The Pi models (data/pi_models.toml), how the firmware reads config.txt, and
what it will boot from a boot partition, read here or on a board.  Used by
`rtforge bootcheck`, by deploy (to check a change before it is armed) and by
tune; it may use the transport room only.
"""
