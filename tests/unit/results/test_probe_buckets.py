"""The probe's histogram bucket rule exists twice: in C (probe/hist.c), where
the probe counts, and in Python (results/raw/finalize.py), where a killed run's
per-second maxima are put back into buckets.  This test ties them: the real
probe buckets values, and the Python rule must name the same bucket."""

from __future__ import annotations

import json
import random

from rtforge.results.raw.finalize import _probe_bucket

from ...conftest import run_probe


def test_the_python_bucket_rule_is_the_probe_s(probe):
    rng = random.Random(1)
    values = sorted({*range(0, 300), *(1 << k for k in range(7, 62)), *((1 << k) - 1 for k in range(7, 62)),
                     *(rng.randrange(1, 1 << 40) for _ in range(3000))})
    for chunk in (values[i:i + 400] for i in range(0, len(values), 400)):
        doc = json.loads(run_probe(probe, "--hist-stdin", input="\n".join(map(str, chunk))).stdout)
        expected = {}
        for v in chunk:
            expected.setdefault(_probe_bucket(v), 0)
            expected[_probe_bucket(v)] += 1
        assert {(lo, hi): n for lo, hi, n in doc["buckets"]} == expected
