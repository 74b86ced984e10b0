"""The locustfile `loadgen run` starts; `locustfiles/llm.py` is the same few lines for use with `locust -f`."""

from loadgen.glue.plugin import register
from loadgen.glue.user import LLMUser

register()


class StreamingLLMUser(LLMUser):
    pass
