"""The k8s tier's fixtures: Locust stays out of this process (tests/locust_guard.py)."""

from tests.locust_guard import _locust_stays_out_of_this_process  # noqa: F401
