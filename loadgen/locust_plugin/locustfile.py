"""The locustfile: `loadgen run` starts it, `locustfiles/llm.py` re-exports it, and `loadgen locustfile` prints its
path for `locust -f` (loadgen derives one user class per variant from `StreamingLLMUser`)."""

from loadgen.locust_plugin.plugin import register
from loadgen.locust_plugin.user import LLMUser

register()


class StreamingLLMUser(LLMUser):
    pass
