"""rtforge: build, install and prove a PREEMPT_RT Linux for the Raspberry Pi.

The package is layered (docs/architecture.md): ``cli`` parses and
displays; ``measure`` runs latency tests through a ``device`` transport;
``results`` owns the result model, statistics and the run store; ``report``
reads stored results only.  The native sampler's C sources live in
``rtforge/probe``.
"""

__version__ = "0.1.0"
