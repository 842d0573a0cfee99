"""Settings shared by the whole suite (nothing daemon-related lives here)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

# Property tests run on loaded 2-core CI machines: no per-example deadline (the per-test
# timeout still bounds them), and no flakiness from a slow first example.
settings.register_profile(
    "memwarden",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("memwarden")
