"""Kernels: boards (data), sources, RT enablement, and on top of them
configuration, build, packages and the QEMU boot test (issue 4).

    boards.py   Board profiles from rtforge/data/boards/*.toml
    sources.py  rpi / git / tar / dir / debian sources, cached, with a source id
    rtpatch.py  is PREEMPT_RT configuration-only here, or which RT patch, applied safely
    fetch.py    downloads, hashing, extraction and the cache layout they share
"""
