"""The state room: what a target's kernel shows now, and what rtforge tune recorded there.

One round trip reads /proc, /sys and rtforge's tune record (snapshot); the
kernel's text formats are parsed here (procparse); the record's format
lives here (tunestate) because doctor reports it and tune writes it.  It
may use the transport room only.
"""
