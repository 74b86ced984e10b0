"""Streaming LLM users driven by a loadgen scenario.

locust -f locustfiles/llm.py --scenario loadgen/examples/demo.yaml            # web UI on :8089
locust -f locustfiles/llm.py --scenario FILE --headless                      # runs load.duration, writes report
"""

from loadgen.locust_plugin.plugin import register
from loadgen.locust_plugin.user import LLMUser

register()


class StreamingLLMUser(LLMUser):
    pass
