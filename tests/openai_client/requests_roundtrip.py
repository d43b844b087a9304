"""The official `openai` client against Turnstile (run by tests/it/openai_requests.rs).

Usage: requests_roundtrip.py BASE_URL  (e.g. http://127.0.0.1:PORT/v1)

1. A client-side tool round trip: the model's tool call comes back with
   finish_reason "tool_calls"; the tool result continues the turn.
2. A retry: the first reply is lost on the way back (the transport answers 500 instead),
   the client retries with x-stainless-retry-count: 1 and the same body, and gets the
   original answer; Turnstile stores the message once and calls the model once.
Prints "ok" when every check passed.
"""

import sys

import openai

try:
    import httpx
except ImportError:  # some openai builds ship their HTTP client as `httpx2`
    import httpx2 as httpx

BASE_URL = sys.argv[1]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "the weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
            },
        },
    }
]


class LoseFirstReply(httpx.BaseTransport):
    """Forwards every request; the first reply to a message with `marker` is replaced by a 500."""

    def __init__(self, marker: bytes):
        self.inner = httpx.HTTPTransport()
        self.marker = marker
        self.lost = False
        self.retry_counts = []

    def handle_request(self, request):
        request.read()
        self.retry_counts.append(request.headers.get("x-stainless-retry-count"))
        response = self.inner.handle_request(request)
        if not self.lost and self.marker in request.content:
            self.lost = True
            response.read()
            response.close()
            return httpx.Response(
                500,
                json={"error": {"message": "lost on the way", "type": "server_error"}},
                request=request,
            )
        return response

    def close(self):
        self.inner.close()


def tool_round_trip():
    client = openai.OpenAI(base_url=BASE_URL, api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": "what is the weather in Oslo?"}]
    first = client.chat.completions.create(
        model="fake-model", messages=messages, tools=TOOLS, user="py-tools"
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls", first
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather", call
    assert call.function.arguments == '{"city":"Oslo"}', call
    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"})
    second = client.chat.completions.create(
        model="fake-model", messages=messages, tools=TOOLS, user="py-tools"
    )
    assert second.choices[0].finish_reason == "stop", second
    assert second.choices[0].message.content == "the tool said: sunny, 21 C", second


def retry_joins_the_original():
    transport = LoseFirstReply(b"only once")
    client = openai.OpenAI(
        base_url=BASE_URL,
        api_key="unused",
        max_retries=2,
        http_client=httpx.Client(transport=transport),
    )
    reply = client.chat.completions.create(
        model="fake-model",
        messages=[{"role": "user", "content": "only once"}],
        user="py-retry",
    )
    assert reply.choices[0].message.content == "answer to: only once", reply
    assert transport.retry_counts == ["0", "1"], transport.retry_counts


tool_round_trip()
retry_joins_the_original()
print("ok")
