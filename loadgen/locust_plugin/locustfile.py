"""The locustfile `loadgen run` starts; `locustfiles/llm.py` is the same few lines for use with `locust -f`."""

from loadgen.locust_plugin.plugin import register
from loadgen.locust_plugin.user import LLMUser

register()


class StreamingLLMUser(LLMUser):
    pass
