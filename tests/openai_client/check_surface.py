"""The OpenAI reply surface of Turnstile through the official `openai` Python client.

Run by tests/it/openai_client.rs, which starts the servers and passes:
  TURNSTILE_BASE_URL          a server whose model answers (…/v1)
  TURNSTILE_FAILING_BASE_URL  a server whose model cannot be reached (…/v1)
  TURNSTILE_MODEL             the configured model's name
  TURNSTILE_EXPECTED_TEXT     the answer the model gives
  TURNSTILE_EXPECTED_USAGE    prompt,completion tokens the model reports
Exits non-zero (with the failed assertion) on any mismatch.
"""

import os
import sys

import openai


def env(name):
    value = os.environ.get(name)
    if not value:
        sys.exit(f"{name} is not set")
    return value


def main():
    model = env("TURNSTILE_MODEL")
    expected = env("TURNSTILE_EXPECTED_TEXT")
    prompt, completion = (int(n) for n in env("TURNSTILE_EXPECTED_USAGE").split(","))
    client = openai.OpenAI(base_url=env("TURNSTILE_BASE_URL"), api_key="unused", max_retries=0)

    # The configured model, then each agent by the name that selects it (the default agent
    # `main` when none is configured).
    ids = [m.id for m in client.models.list()]
    assert ids == [model, "agent:main"], ids

    whole = client.chat.completions.create(
        model="gpt-4o", user="py-whole", messages=[{"role": "user", "content": "hi"}]
    )
    assert whole.choices[0].message.content == expected, whole
    assert whole.choices[0].finish_reason == "stop", whole
    assert whole.model == model, whole
    assert whole.usage is not None, whole
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens) == (prompt, completion), whole
    assert whole.usage.total_tokens == prompt + completion, whole

    stream = client.chat.completions.create(
        model="gpt-4o",
        user="py-stream",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == expected, (text, chunks)
    content_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content_chunks) > 1, chunks
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"], chunks
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None, last
    assert last.usage.total_tokens == prompt + completion, last

    failing = openai.OpenAI(
        base_url=env("TURNSTILE_FAILING_BASE_URL"), api_key="unused", max_retries=0
    )
    try:
        failing.chat.completions.create(
            model="gpt-4o", user="py-fail", messages=[{"role": "user", "content": "hi"}]
        )
        raise AssertionError("a failed model call must raise")
    except openai.APIStatusError as e:
        assert e.status_code == 502, e
        assert e.type == "server_error", (e.type, e.body)
        assert e.code == "model_error", (e.code, e.body)
        assert "http://" not in str(e.message), e.message

    try:
        for _ in failing.chat.completions.create(
            model="gpt-4o",
            user="py-fail",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
        ):
            pass
        raise AssertionError("a failed streamed call must raise")
    except openai.APIError as e:
        assert not isinstance(e, openai.APIStatusError), e
        assert "http://" not in str(e.message), e.message

    print("openai client checks passed")


if __name__ == "__main__":
    main()
