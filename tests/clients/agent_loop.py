#!/usr/bin/env python3
"""A small agent loop through the official `openai` package: Qwen2.5-Coder-1.5B-Instruct gets a
`calculator` tool and a question whose answer needs it; the loop runs the calls the model makes,
sends the results back as `role: "tool"` messages, and checks that the final answer holds the
right number. Usage: agent_loop.py LLAMAFILE_BINARY qwen2.5-coder-1.5b-instruct.gguf

The first turn asks with tool_choice "required" (left to itself, this model writes its call as a
JSON code block in the content); later turns with "auto", so the model may call again or answer;
a system prompt tells it to answer in plain text once it has a result.
Greedy (temperature 0, fixed seed). Exits non-zero, saying why, when the model calls no tool,
calls it badly, or its final answer lacks the product."""

import ast
import json
import operator
import re
import sys
import time

import openai

from llamafile_server import start, stop

# Without a system prompt, this model answers a tool result by writing the same call again as a
# JSON code block (tool_choice "auto"), or thanks the user for it (tools hidden, "none").
SYSTEM = ("You are a helpful assistant. Use the calculator tool for arithmetic. When you have the "
          "tool's result, answer the user's question in plain text.")
QUESTION = "What is 1234 * 5678? Use the calculator."
EXPECTED = 1234 * 5678  # 7006652
MAX_TURNS = 4

CALCULATOR = {"type": "function", "function": {
    "name": "calculator",
    "description": "Evaluate an arithmetic expression: numbers, + - * / and parentheses.",
    "parameters": {"type": "object",
                   "properties": {"expression": {"type": "string",
                                                 "description": "The arithmetic expression to evaluate"}},
                   "required": ["expression"]}}}

OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
             ast.Div: operator.truediv, ast.USub: operator.neg, ast.UAdd: operator.pos}


def calculate(expression):
    """The value of `expression`, only numbers, + - * / and parentheses (no names, no calls)."""
    def value(node):
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](value(node.operand))
        raise ValueError(f"not allowed in an expression: {ast.dump(node)}")
    result = value(ast.parse(expression, mode="eval"))
    if isinstance(result, float) and result.is_integer():
        result = int(result)
    return result


def run_call(call):
    """The tool's answer to one call, as the `content` of a `role: "tool"` message."""
    if call.function.name != "calculator":
        return f"error: no tool named {call.function.name!r}"
    try:
        args = json.loads(call.function.arguments)
        return str(calculate(args["expression"]))
    except (ValueError, KeyError, TypeError, SyntaxError, ZeroDivisionError) as e:
        return f"error: {e}"


def main():
    binary, model = sys.argv[1], sys.argv[2]
    assert calculate("1234 * 5678") == EXPECTED and calculate("-(2 + 4) / 4") == -1.5
    for bad in ("__import__('os')", "2 ** 8", "abs(-1)", "[1]"):
        try:
            calculate(bad)
            raise AssertionError(f"the calculator evaluated {bad!r}")
        except (ValueError, SyntaxError):
            pass

    started = time.monotonic()
    proc, base_url = start(binary, model, slots=1, ctx=4096)
    print(f"server up in {time.monotonic() - started:.1f}s")
    try:
        client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=600)
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
        results = []  # (expression arguments, result) of each call run
        final = None
        for turn in range(MAX_TURNS):
            choice_arg = "required" if turn == 0 else "auto"
            t = time.monotonic()
            reply = client.chat.completions.create(
                model="qwen", messages=messages, tools=[CALCULATOR], tool_choice=choice_arg,
                temperature=0, seed=42, max_tokens=256)
            choice = reply.choices[0]
            msg = choice.message
            print(f"turn {turn + 1} (tool_choice {choice_arg}, {time.monotonic() - t:.1f}s, "
                  f"{reply.usage.prompt_tokens} prompt + {reply.usage.completion_tokens} "
                  f"tokens): finish_reason {choice.finish_reason}")
            if not msg.tool_calls:
                if turn == 0:
                    sys.exit(f"FAIL: tool_choice 'required' gave no tool call: {reply}")
                final = msg.content or ""
                print(f"  answer: {final!r}")
                break
            assert choice.finish_reason == "tool_calls", reply
            messages.append({
                "role": "assistant", "content": msg.content,
                "tool_calls": [{"id": c.id, "type": "function",
                                "function": {"name": c.function.name,
                                             "arguments": c.function.arguments}}
                               for c in msg.tool_calls]})
            for c in msg.tool_calls:
                result = run_call(c)
                print(f"  call {c.id}: {c.function.name}({c.function.arguments}) -> {result}")
                results.append((c.function.arguments, result))
                messages.append({"role": "tool", "tool_call_id": c.id, "content": result})
        else:
            sys.exit(f"FAIL: no final answer after {MAX_TURNS} turns; calls: {results}")

        if not any(r == str(EXPECTED) for _, r in results):
            sys.exit(f"FAIL: no calculator call gave {EXPECTED}; calls and results: {results}")
        # The number as the model writes it; thousands separators ("7,006,652") count.
        digits = re.sub(r"(?<=\d)[,\u202f\u00a0 ](?=\d{3}\b)", "", final)
        if not re.search(rf"(?<![\d.]){EXPECTED}(?!\d|\.\d*[1-9])", digits):
            sys.exit(f"FAIL: the final answer does not contain {EXPECTED}: {final!r}")
        print(f"openai {openai.__version__}: agent loop (calculator, {len(results)} call(s), "
              f"{turn + 1} turns) in {time.monotonic() - started:.1f}s: ok")
    finally:
        stop(proc)


if __name__ == "__main__":
    main()
