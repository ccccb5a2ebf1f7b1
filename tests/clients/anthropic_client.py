#!/usr/bin/env python3
"""The official `anthropic` Python package against our server's Messages API: a message with a
system prompt and multipart content (streamed and not, the stream's text equal to the whole
reply), stop sequences, token counting, tools (`tool_choice` any and a named tool, streamed and
not) and a `tool_result` sent back. Usage: anthropic_client.py LLAMAFILE_BINARY MODEL.gguf

Starts the server on a free loopback port, runs the checks, stops the server; exits non-zero on
any failure."""

import json
import sys

import anthropic

from llamafile_server import start, stop

WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city name"},
                       "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]},
}
TIME = {
    "name": "get_time",
    "description": "Get the current time in a time zone",
    "input_schema": {"type": "object", "properties": {"zone": {"type": "string"}},
                     "required": ["zone"]},
}


def main():
    binary, model = sys.argv[1], sys.argv[2]
    proc, base_url = start(binary, model)
    try:
        client = anthropic.Anthropic(base_url=base_url.removesuffix("/v1"), api_key="unused",
                                     max_retries=0, timeout=120)
        text = messages(client)
        calls = tools(client)
        print(f"anthropic {anthropic.__version__}: messages (streamed and not), stop sequences, "
              "count_tokens, tools (streamed and not), tool results: ok")
        print(f"  answer: {text!r}")
        for call in calls:
            print(f"  tool_use: {call}")
    finally:
        stop(proc)


def messages(client):
    request = dict(
        model="any", max_tokens=16, extra_body={"temperature": 0}, system="Answer in one short sentence.",
        messages=[{"role": "user", "content": [
            {"type": "text", "text": "What is the capital"},
            {"type": "text", "text": " of France?"}]}])
    reply = client.messages.create(**request)
    assert reply.type == "message" and reply.role == "assistant", reply
    assert reply.id.startswith("msg_"), reply.id
    assert reply.stop_reason in ("end_turn", "max_tokens"), reply
    assert [b.type for b in reply.content] == ["text"], reply.content
    text = reply.content[0].text
    assert text, reply
    assert reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0, reply.usage

    # Streamed: the SDK's event accumulation gives the same message.
    with client.messages.stream(**request) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds
    assert "content_block_start" in kinds and "content_block_stop" in kinds, kinds
    assert final.content[0].text == text, (final.content, text)
    assert final.stop_reason == reply.stop_reason, final
    assert final.usage.output_tokens == reply.usage.output_tokens, final.usage

    # A stop sequence: the text ends before it, and the reply says which one stopped it.
    first_word = text.split()[1] if len(text.split()) > 1 else None
    if first_word:
        stopped = client.messages.create(**{**request, "stop_sequences": [first_word]})
        assert stopped.stop_reason == "stop_sequence", stopped
        assert stopped.stop_sequence == first_word, stopped
        assert first_word not in stopped.content[0].text, stopped.content

    counted = client.messages.count_tokens(
        model="any", system=request["system"], messages=request["messages"])
    assert counted.input_tokens == reply.usage.input_tokens, (counted, reply.usage)

    try:
        client.messages.create(model="any", max_tokens=8, messages=[
            {"role": "user", "content": [{"type": "nope", "text": "x"}]}])
        raise AssertionError("an unknown content block should be refused")
    except anthropic.BadRequestError as e:
        assert e.status_code == 400 and "messages[0].content[0]" in str(e), e
    return text


def tools(client):
    """Tools with tool_choice `any` (streamed and not) and a named tool; the call's input is
    checked against its schema, then a tool_result goes back and the model answers in text."""
    import jsonschema
    schemas = {t["name"]: t["input_schema"] for t in (WEATHER, TIME)}
    question = {"role": "user", "content": "What is the weather like in Paris today?"}
    request = dict(model="any", max_tokens=96, extra_body={"temperature": 0}, tools=[WEATHER, TIME],
                   messages=[question])

    reply = client.messages.create(**request, tool_choice={"type": "any"})
    assert reply.stop_reason == "tool_use", reply
    uses = [b for b in reply.content if b.type == "tool_use"]
    assert len(uses) == 1, reply.content
    use = uses[0]
    assert use.id and use.name in schemas, use
    jsonschema.validate(use.input, schemas[use.name])

    with client.messages.stream(**request, tool_choice={"type": "any"}) as stream:
        for _ in stream:
            pass
        final = stream.get_final_message()
    streamed = [b for b in final.content if b.type == "tool_use"]
    assert final.stop_reason == "tool_use", final
    assert len(streamed) == 1 and streamed[0].name == use.name, final.content
    assert streamed[0].input == use.input, (streamed[0].input, use.input)

    named = client.messages.create(**request, tool_choice={"type": "tool", "name": "get_time"})
    times = [b for b in named.content if b.type == "tool_use"]
    assert [b.name for b in times] == ["get_time"], named.content
    jsonschema.validate(times[0].input, schemas["get_time"])

    answer = client.messages.create(
        model="any", max_tokens=24, extra_body={"temperature": 0}, tools=[WEATHER, TIME],
        messages=[question,
                  {"role": "assistant", "content": reply.content},
                  {"role": "user", "content": [
                      {"type": "tool_result", "tool_use_id": use.id,
                       "content": json.dumps({"temperature": 18, "sky": "clear"})}]}])
    assert answer.stop_reason in ("end_turn", "max_tokens", "tool_use"), answer
    assert answer.content, answer
    return [(use.name, use.input), (times[0].name, times[0].input)]


if __name__ == "__main__":
    main()
