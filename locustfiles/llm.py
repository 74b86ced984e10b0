"""Streaming LLM users driven by a loadgen scenario: the packaged locustfile, for `locust -f`.

locust -f locustfiles/llm.py --scenario loadgen/examples/demo.yaml            # web UI on :8089
locust -f locustfiles/llm.py --scenario FILE --headless                      # runs load.duration, writes report

Installed without this repository: `locust -f "$(loadgen locustfile)" --scenario FILE`.
"""

from loadgen.locust_plugin.locustfile import StreamingLLMUser

__all__ = ["StreamingLLMUser"]
