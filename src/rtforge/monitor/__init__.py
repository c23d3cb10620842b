"""Soak monitoring: the probe's --soak mode on a board (or this machine),
as a systemd service or in the foreground, and its windows brought into
the run store.

    spec      what the monitor measures, as the probe's command line
    board     what a target must offer (one round trip), the probe's upload
    service   rtforge-monitor.service: install, start, stop, status
    live      `monitor run`: the same measurement in the foreground
    fetch     the board's windows, hours, days, events and evidence into the store

The windows themselves (reading, merging, rolling) are results/soak/windows.py;
the store's per-board folder is results/soak/folder.py.
"""
