"""Running a latency test: engines, loads, and the session that ties them."""
