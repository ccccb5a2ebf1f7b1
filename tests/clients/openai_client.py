#!/usr/bin/env python3
"""The official `openai` Python package against our server: chat completion (streamed and not),
tool calls (required and named, streamed and not), completion, the models list, and embeddings
(a second server, with --embedding --pooling mean). Usage: openai_client.py LLAMAFILE_BINARY
MODEL.gguf

Starts the server on a free loopback port, runs the checks, stops the server; exits non-zero on
any failure."""

import json
import sys

import openai

from llamafile_server import start, stop


def main():
    binary, model = sys.argv[1], sys.argv[2]
    proc, base_url = start(binary, model)
    try:
        client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)

        models = client.models.list()
        ids = [m.id for m in models.data]
        assert ids and ids[0].endswith(".gguf"), ids

        messages = [{"role": "user", "content": "What is the capital of France?"}]
        chat = client.chat.completions.create(
            model=ids[0], messages=messages, max_tokens=16, temperature=0, seed=1)
        text = chat.choices[0].message.content
        assert chat.object == "chat.completion", chat
        assert chat.choices[0].message.role == "assistant"
        assert text, chat
        assert chat.choices[0].finish_reason in ("stop", "length"), chat
        assert chat.usage.completion_tokens > 0 and chat.usage.prompt_tokens > 0, chat.usage

        stream = client.chat.completions.create(
            model=ids[0], messages=messages, max_tokens=16, temperature=0, seed=1, stream=True,
            stream_options={"include_usage": True})
        pieces, finish, usage = [], None, None
        for chunk in stream:
            assert chunk.object == "chat.completion.chunk", chunk
            if chunk.usage:
                usage = chunk.usage
            for c in chunk.choices:
                if c.delta.content:
                    pieces.append(c.delta.content)
                if c.finish_reason:
                    finish = c.finish_reason
        assert "".join(pieces) == text, ("".join(pieces), text)
        assert finish == chat.choices[0].finish_reason, finish
        assert usage and usage.completion_tokens == chat.usage.completion_tokens, usage

        cmpl = client.completions.create(
            model=ids[0], prompt="The capital of France is", max_tokens=8, temperature=0)
        assert cmpl.object == "text_completion", cmpl
        assert "Paris" in cmpl.choices[0].text, cmpl.choices[0].text

        streamed = "".join(
            c.choices[0].text
            for c in client.completions.create(
                model=ids[0], prompt="The capital of France is", max_tokens=8, temperature=0,
                stream=True)
            if c.choices)
        assert streamed == cmpl.choices[0].text, (streamed, cmpl.choices[0].text)

        # n > 1: each choice its own sequence, seeded choices differ; streamed as non-streamed.
        many = client.chat.completions.create(
            model=ids[0], messages=messages, n=3, max_tokens=12, temperature=1.0, seed=7)
        assert [c.index for c in many.choices] == [0, 1, 2], many
        texts = [c.message.content for c in many.choices]
        assert len(set(texts)) > 1, texts
        one = client.chat.completions.create(
            model=ids[0], messages=messages, n=1, max_tokens=12, temperature=1.0, seed=7)
        assert one.choices[0].message.content == texts[0], (one, texts)
        parts = {}
        for c in client.chat.completions.create(
                model=ids[0], messages=messages, n=3, max_tokens=12, temperature=1.0, seed=7,
                stream=True):
            for ch in c.choices:
                parts[ch.index] = parts.get(ch.index, "") + (ch.delta.content or "")
        assert [parts[i] for i in range(3)] == texts, (parts, texts)
        legacy = client.completions.create(
            model=ids[0], prompt="Once upon a time", n=2, max_tokens=8, temperature=1.0, seed=3,
            extra_body={"ignore_eos": True})
        assert [c.index for c in legacy.choices] == [0, 1], legacy
        assert legacy.usage.completion_tokens == 16, legacy.usage
        try:
            client.chat.completions.create(model=ids[0], messages=messages, n=0)
            raise AssertionError("n=0 should be refused")
        except openai.BadRequestError as e:
            assert e.status_code == 400 and "n" in str(e), e

        # Structured output: response_format json_schema and json_object, checked by jsonschema.
        import jsonschema
        schema = {"type": "object",
                  "properties": {"city": {"type": "string", "maxLength": 30},
                                 "population": {"type": "integer", "minimum": 0, "maximum": 50000000},
                                 "tags": {"type": "array", "items": {"enum": ["big", "old", "coastal"]},
                                          "maxItems": 3}},
                  "required": ["city", "population"]}
        structured = client.chat.completions.create(
            model=ids[0], messages=[{"role": "user", "content": "Describe Paris as JSON."}],
            max_tokens=200, temperature=0.7, seed=3,
            response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema}})
        doc = json.loads(structured.choices[0].message.content)
        jsonschema.validate(doc, schema)
        obj = client.chat.completions.create(
            model=ids[0], messages=[{"role": "user", "content": "Describe a cat."}],
            max_tokens=200, temperature=0, response_format={"type": "json_object"})
        assert isinstance(json.loads(obj.choices[0].message.content), dict), obj

        # Log-probabilities are the model's (before penalties): greedy picks the top one.
        lp = client.chat.completions.create(
            model=ids[0], messages=messages, max_tokens=6, temperature=0, logprobs=True,
            top_logprobs=2)
        entries = lp.choices[0].logprobs.content
        assert entries and all(len(e.top_logprobs) == 2 and e.logprob <= 0 for e in entries), lp
        assert all(e.top_logprobs[0].token == e.token for e in entries), lp
        banned = entries[0].top_logprobs[0]
        penalised = client.chat.completions.create(
            model=ids[0], messages=messages, max_tokens=6, temperature=0, logprobs=True,
            presence_penalty=0.5, frequency_penalty=0.5, logit_bias={str(banned.id): -100})
        assert penalised.choices[0].logprobs.content[0].token != banned.token, penalised
        try:
            client.chat.completions.create(
                model=ids[0], messages=messages,
                response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}})
            raise AssertionError("an unsupported schema should be refused")
        except openai.BadRequestError as e:
            assert e.status_code == 400 and "response_format" in str(e), e

        try:
            client.embeddings.create(model=ids[0], input="hello")
            raise AssertionError("embeddings need --embedding")
        except openai.APIStatusError as e:
            assert e.status_code == 501 and "--embeddings" in str(e), e

        calls = tool_calls(client, ids[0])
        said, called = responses(client, ids[0])

        print(f"openai {openai.__version__}: models, chat (streamed and not), completions, "
              "n > 1 choices, response_format, logprobs, tool calls, responses: ok")
        print(f"  structured: {doc}")
        print(f"  answer: {text!r}")
        for call in calls:
            print(f"  tool call: {call}")
        print(f"  responses: {said!r}, function call {called}")
    finally:
        stop(proc)
    embeddings(binary, model)


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "description": "The city name"},
                                  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Get the current time in a time zone",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string"}},
                   "required": ["zone"]}}}


def tool_calls(client, model):
    """Tools with tool_choice "required" (streamed and not) and a named function. SmolLM2's
    template has no tool format of its own: the server uses llama.cpp's generic JSON one, the
    reply constrained to a call whose arguments match the tool's schema."""
    import jsonschema
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TIME)}
    messages = [{"role": "user", "content": "What is the weather like in Paris today?"}]
    request = dict(model=model, messages=messages, tools=[WEATHER, TIME], max_tokens=96,
                   temperature=0, seed=1)

    def check(name, arguments):
        assert name in schemas, name
        args = json.loads(arguments)
        jsonschema.validate(args, schemas[name])
        return name, args

    whole = client.chat.completions.create(**request, tool_choice="required")
    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls", whole
    assert choice.message.role == "assistant", whole
    assert choice.message.tool_calls and len(choice.message.tool_calls) == 1, whole
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id, call
    required = check(call.function.name, call.function.arguments)
    assert not choice.message.content, whole

    # Streamed, accumulated as OpenAI's function-calling guide does: the first delta of a call
    # holds its id and name (and arguments ""), later ones append to the arguments.
    final, finish, content = {}, None, ""
    for chunk in client.chat.completions.create(**request, tool_choice="required", stream=True):
        assert chunk.object == "chat.completion.chunk", chunk
        for c in chunk.choices:
            content += c.delta.content or ""
            for tc in c.delta.tool_calls or []:
                if tc.index not in final:
                    assert tc.id and tc.function.name, ("id and name come first", tc)
                    final[tc.index] = tc
                else:
                    assert not tc.id and not tc.function.name, ("id and name come once", tc)
                    final[tc.index].function.arguments += tc.function.arguments
            if c.finish_reason:
                finish = c.finish_reason
    assert finish == "tool_calls", finish
    assert list(final) == [0], final
    assert not content, ("no content beside the call", content)
    streamed = final[0]
    assert streamed.type == "function", streamed
    assert check(streamed.function.name, streamed.function.arguments) == required, (
        "streamed and whole calls differ", streamed, call)
    assert streamed.function.arguments == call.function.arguments, (streamed, call)

    # A named function is the one called, whatever the question.
    named = client.chat.completions.create(
        **request, tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert named.choices[0].finish_reason == "tool_calls", named
    ncall = named.choices[0].message.tool_calls[0]
    assert ncall.function.name == "get_time", named
    named_call = check(ncall.function.name, ncall.function.arguments)
    return [required, named_call]


def responses(client, model):
    """client.responses: text (streamed and not: the stream's deltas and its completed response
    equal the whole reply), instructions, and a function call with tool_choice "required"."""
    import jsonschema
    request = dict(model=model, input="What is the capital of France?", max_output_tokens=16,
                   temperature=0, instructions="Answer in one short sentence.")
    whole = client.responses.create(**request)
    assert whole.object == "response" and whole.status in ("completed", "incomplete"), whole
    text = whole.output_text
    assert text, whole
    assert whole.usage.input_tokens > 0 and whole.usage.output_tokens > 0, whole.usage

    deltas, completed = [], None
    for event in client.responses.create(**request, stream=True):
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        elif event.type in ("response.completed", "response.incomplete"):
            completed = event.response
    assert "".join(deltas) == text, ("".join(deltas), text)
    assert completed and completed.output_text == text, completed

    weather = {"type": "function", "name": WEATHER["function"]["name"],
               "description": WEATHER["function"]["description"],
               "parameters": WEATHER["function"]["parameters"]}
    called = client.responses.create(
        model=model, input="What is the weather like in Paris today?", tools=[weather],
        tool_choice="required", max_output_tokens=96, temperature=0)
    calls = [o for o in called.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].call_id, called.output
    arguments = json.loads(calls[0].arguments)
    jsonschema.validate(arguments, weather["parameters"])
    return text, arguments


def embeddings(binary, model):
    """client.embeddings.create: string and list input, float and base64 encodings."""
    import base64
    import math
    import struct
    proc, base_url = start(binary, model, "--embedding", "--pooling", "mean")
    try:
        client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)
        one = client.embeddings.create(model="m", input="hello world", encoding_format="float")
        assert one.object == "list" and one.model == "m", one
        vec = one.data[0].embedding
        assert len(one.data) == 1 and one.data[0].index == 0 and len(vec) == 576, one
        assert abs(math.sqrt(sum(x * x for x in vec)) - 1.0) < 1e-4, "normalised"
        assert one.usage.prompt_tokens == one.usage.total_tokens > 0, one.usage

        many = client.embeddings.create(
            model="m", input=["hello world", "The capital of France is Paris."],
            encoding_format="float")
        assert [d.index for d in many.data] == [0, 1], many
        assert many.data[0].embedding == vec, "a batch equals its inputs one at a time"
        assert many.data[1].embedding != vec
        assert many.usage.prompt_tokens > one.usage.prompt_tokens, many.usage

        # The package's default asks for base64 and decodes it to floats itself.
        default = client.embeddings.create(model="m", input=["hello world"])
        assert default.data[0].embedding == vec, "default (base64) decodes to the same floats"
        raw = client.embeddings.create(model="m", input="hello world", encoding_format="base64")
        text = raw.data[0].embedding
        assert isinstance(text, str), type(text)
        floats = list(struct.unpack(f"<{len(vec)}f", base64.b64decode(text)))
        assert floats == vec, "base64 holds the little-endian f32 bytes"
        print(f"openai {openai.__version__}: embeddings (string, list, float, base64): ok")
    finally:
        stop(proc)


if __name__ == "__main__":
    main()
