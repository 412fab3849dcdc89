"""The test servers refuse what the real APIs refuse (tests/api_rules.py and friends).

Each rule through the real SDKs against the real servers: a request the API refuses
gets the API's error text and consumes no scripted reply; the same request made valid
is accepted. The thinking round trip: a reply's thinking block echoed verbatim passes,
changed it fails, dropped in a tool loop it fails (not on preserved-thinking models),
and on a preserved model it is bound to the conversation before it.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.api_rules import BINDING_BETA, TOOL_CHANGES_BETA, ModelRules, prompt_tokens, tokens
from tests.chat_server import ChatServer, call, chat_server, chat_text, chat_tool_calls
from tests.messages_server import (
    JsonDict,
    MessagesServer,
    redacted_thinking_block,
    text_reply,
    thinking_block,
    tool_use,
    tool_use_reply,
)

__all__ = ["chat_server"]  # the fixture
Msgs = list[JsonDict]


def client(server: MessagesServer) -> Any:
    """The real SDK (typed Any: requests here are plain dicts, some of them invalid)."""
    import anthropic  # here, not at the top: the quick tier collects this module only

    return anthropic.Anthropic(base_url=server.url, api_key="test", max_retries=0)


def create(server: MessagesServer, messages: Msgs, **params: Any) -> Any:
    params.setdefault("model", "claude-test")
    params.setdefault("max_tokens", 2048)
    return client(server).messages.create(messages=messages, **params)


def refusal(server: MessagesServer, messages: Msgs, **params: Any) -> str:
    """The message of the 400 the request gets (recorded, consuming no queued reply)."""
    import anthropic

    pending, before = server.pending, len(server.requests)
    with pytest.raises(anthropic.BadRequestError) as caught:
        create(server, messages, **params)
    error: JsonDict = caught.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error"
    assert server.pending == pending and len(server.requests) == before + 1
    return str(error["message"])


def accepted(server: MessagesServer, messages: Msgs, **params: Any) -> Any:
    """The reply to a request the server takes (a text reply unless one is queued)."""
    if not server.pending:
        server.enqueue(text_reply("ok"))
    pending = server.pending
    reply = create(server, messages, **params)
    assert server.pending == pending - 1
    return reply


def echo(reply: Any) -> JsonDict:
    """A reply as the assistant message a client sends back, verbatim."""
    return {"role": "assistant", "content": [b.to_dict() for b in reply.content]}


def user(text: str) -> JsonDict:
    return {"role": "user", "content": text}


def results(*pairs: tuple[str, str]) -> JsonDict:
    blocks = [{"type": "tool_result", "tool_use_id": i, "content": c} for i, c in pairs]
    return {"role": "user", "content": blocks}


TOOLS = [{"name": "read", "description": "Read a file", "input_schema": {"type": "object"}}]
ADAPTIVE = {"type": "adaptive"}


# --- structure ------------------------------------------------------------------------


def test_a_valid_request_gets_the_scripted_reply_unchanged(messages_server: MessagesServer) -> None:
    messages_server.enqueue(text_reply("hi", input_tokens=7, output_tokens=3))
    reply = accepted(messages_server, [user("hello")])
    assert [b.type for b in reply.content] == ["text"]
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (7, 3)


def test_at_most_four_cache_breakpoints(messages_server: MessagesServer) -> None:
    mark = {"type": "ephemeral"}
    blocks = [{"type": "text", "text": f"part {i}", "cache_control": mark} for i in range(5)]
    text = refusal(messages_server, [{"role": "user", "content": blocks}])
    assert text == "A maximum of 4 blocks with cache_control may be provided. Found 5."
    blocks[0].pop("cache_control")
    accepted(messages_server, [{"role": "user", "content": blocks}])


def test_every_tool_use_is_answered_in_the_next_message(messages_server: MessagesServer) -> None:
    call_ = tool_use("read", {"path": "a"}, id="toolu_A")
    asked = [user("read a"), {"role": "assistant", "content": [call_]}]
    assert refusal(messages_server, [*asked, user("well?")]) == (
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after:"
        " toolu_A. Each `tool_use` block must have a corresponding `tool_result` block in the"
        " next message."
    )
    text_first = {"role": "user", "content": [{"type": "text", "text": "here"},
                                              *results(("toolu_A", "x"))["content"]]}  # fmt: skip
    assert refusal(messages_server, [*asked, text_first]) == (
        "messages.2: Did not find 1 `tool_result` block(s) at the beginning of this message."
        " Messages following `tool_use` blocks must begin with a matching number of"
        " `tool_result` blocks."
    )
    accepted(messages_server, [*asked, results(("toolu_A", "x"))], tools=TOOLS)


def test_a_tool_result_answers_a_tool_use_of_the_previous_message(
    messages_server: MessagesServer,
) -> None:
    messages = [user("hi"), {"role": "assistant", "content": "hello"}, results(("toolu_Z", "x"))]
    assert refusal(messages_server, messages) == (
        "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_Z."
        " Each `tool_result` block must have a corresponding `tool_use` block in the previous"
        " message."
    )


def test_system_messages_only_where_the_model_takes_them(messages_server: MessagesServer) -> None:
    messages = [user("hi"), {"role": "system", "content": "be brief"}]
    assert refusal(messages_server, messages) == (
        "messages.1.role: Input should be 'user' or 'assistant'"
    )
    accepted(messages_server, messages, model="claude-fable-5")
    assert refusal(messages_server, [{"role": "tool", "content": "x"}], model="claude-fable-5") == (
        "messages.0.role: Input should be 'user', 'assistant' or 'system'"
    )


# --- thinking settings ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "params", "text"),
    [
        ("claude-fable-5", {"thinking": {"type": "enabled", "budget_tokens": 1024}},
         '"thinking.type.enabled" is not supported for this model. Use "thinking.type.adaptive"'
         ' and "output_config.effort" to control thinking behavior.'),
        ("claude-mythos-5-1", {"thinking": {"type": "disabled"}},
         '"thinking.type.disabled" is not supported for this model. Use "thinking.type.adaptive"'
         ' and "output_config.effort" to control thinking behavior.'),
        ("claude-haiku-4-5-20251001", {"thinking": ADAPTIVE},
         '"thinking.type.adaptive" is not supported for this model. Use "thinking.type.enabled"'
         ' and "thinking.budget_tokens" to control thinking behavior.'),
        ("claude-test", {"thinking": {"type": "enabled", "budget_tokens": 1000}},
         "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"),
        ("claude-test", {"thinking": {"type": "enabled", "budget_tokens": 2048}},
         "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our"
         " documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
         "#max-tokens-and-context-window-size"),
        ("claude-haiku-4-5", {"output_config": {"effort": "low"}},
         "output_config.effort: effort is not supported for this model"),
        ("claude-opus-4-6", {"output_config": {"effort": "xhigh"}},
         "output_config.effort: effort 'xhigh' is not supported for this model"),
        ("claude-test", {"thinking": ADAPTIVE, "tool_choice": {"type": "any"}, "tools": TOOLS},
         "Thinking may not be enabled when tool_choice forces tool use."),
        ("no-thinking", {"thinking": ADAPTIVE},
         '"thinking.type.adaptive" is not supported for this model.'),
        # Adaptive-only models think unless told otherwise, so forcing a tool is refused.
        ("claude-fable-5", {"tool_choice": {"type": "tool", "name": "read"}, "tools": TOOLS},
         "Thinking may not be enabled when tool_choice forces tool use."),
    ],
)  # fmt: skip
def test_thinking_settings_the_model_refuses(
    messages_server: MessagesServer, model: str, params: JsonDict, text: str
) -> None:
    messages_server.models["no-thinking"] = ModelRules(thinking="none")
    assert refusal(messages_server, [user("hi")], model=model, **params) == text


@pytest.mark.parametrize(
    ("model", "params"),
    [
        ("claude-test", {"thinking": {"type": "enabled", "budget_tokens": 1024}}),
        ("claude-haiku-4-5", {"thinking": {"type": "enabled", "budget_tokens": 1024}}),
        ("claude-fable-5", {"thinking": ADAPTIVE, "output_config": {"effort": "xhigh"}}),
        ("claude-opus-4-6", {"thinking": ADAPTIVE, "output_config": {"effort": "max"}}),
        ("claude-test", {"tool_choice": {"type": "any"}, "tools": TOOLS}),
    ],
)
def test_thinking_settings_the_model_takes(
    messages_server: MessagesServer, model: str, params: JsonDict
) -> None:
    messages_server.enqueue(text_reply("ok"))
    accepted(messages_server, [user("hi")], model=model, **params)


# --- thinking replies and their echo ---------------------------------------------------


def test_a_thinking_model_replies_with_a_signed_thinking_block(
    messages_server: MessagesServer,
) -> None:
    messages_server.enqueue(text_reply("plain"), text_reply("thought", output_tokens=5))
    assert [b.type for b in accepted(messages_server, [user("a")]).content] == ["text"]
    reply = accepted(messages_server, [user("a")], thinking=ADAPTIVE)
    assert [b.type for b in reply.content] == ["thinking", "text"]
    assert reply.content[0].thinking == "Thinking about request 2."
    assert reply.content[0].signature
    assert reply.usage.output_tokens == 5 + tokens("Thinking about request 2.")
    # Fable 5 thinks by default and shows no thinking text unless asked to.
    messages_server.enqueue(text_reply("hidden"))
    reply = accepted(messages_server, [user("a")], model="claude-fable-5")
    assert reply.content[0].type == "thinking" and reply.content[0].thinking == ""


def test_thinking_echoed_verbatim_passes_and_changed_fails(messages_server: MessagesServer) -> None:
    messages_server.enqueue(text_reply("first", model="claude-test"))
    first = accepted(messages_server, [user("q")], thinking=ADAPTIVE)
    history = [user("q"), echo(first), user("more")]
    messages_server.enqueue(text_reply("second"))
    accepted(messages_server, history, thinking=ADAPTIVE)
    changed = echo(first)
    changed["content"][0]["thinking"] += "!"
    text = refusal(messages_server, [user("q"), changed, user("more")], thinking=ADAPTIVE)
    assert text == "messages.1.content.0: Invalid `signature` in `thinking` block"
    forged = echo(first)
    forged["content"][0]["signature"] = "Zm9yZ2Vk"
    text = refusal(messages_server, [user("q"), forged, user("more")])  # checked, thinking off too
    assert text == "messages.1.content.0: Invalid `signature` in `thinking` block"


def test_scripted_thinking_blocks_are_signed_and_bad_ones_refused(
    messages_server: MessagesServer,
) -> None:
    script = text_reply("x")
    script.body["content"][:0] = [thinking_block("mine"), redacted_thinking_block()]
    messages_server.enqueue(script)
    reply = accepted(messages_server, [user("q")], thinking=ADAPTIVE)
    assert [b.type for b in reply.content] == ["thinking", "redacted_thinking", "text"]
    assert reply.content[0].thinking == "mine" and reply.content[1].data
    messages_server.enqueue(text_reply("ok"))
    accepted(messages_server, [user("q"), echo(reply), user("again")], thinking=ADAPTIVE)
    bad = echo(reply)
    bad["content"][1]["data"] = bad["content"][1]["data"][:-8] + "AAAAAAA="
    assert refusal(messages_server, [user("q"), bad, user("again")], thinking=ADAPTIVE) == (
        "messages.1.content.1: Invalid `signature` in `thinking` block"
    )
    text_first = echo(reply)
    text_first["content"].reverse()
    assert refusal(messages_server, [user("q"), text_first, user("again")]) == (
        "messages.1.content.0: If an assistant message contains any thinking blocks, the first"
        " block must be thinking or redacted_thinking. Found text."
    )


def tool_loop(server: MessagesServer, model: str, **params: Any) -> tuple[Msgs, Any]:
    """A first turn that called a tool, with the reply, as the next request sends it."""
    server.enqueue(tool_use_reply(tool_use("read", {"path": "a", "mode": "r"}, id="toolu_1")))
    reply = accepted(server, [user("q")], model=model, tools=TOOLS, **params)
    assert reply.content[0].type == "thinking"
    return [user("q"), echo(reply), results(("toolu_1", "file a"))], reply


def test_a_tool_loop_without_its_thinking_is_refused(messages_server: MessagesServer) -> None:
    messages, _ = tool_loop(messages_server, "claude-test", thinking=ADAPTIVE)
    accepted(messages_server, messages, tools=TOOLS, thinking=ADAPTIVE)
    # Without preserved thinking a block is not bound to what came before it.
    edited = [*messages[:2], results(("toolu_1", "file a, edited"))]
    accepted(messages_server, edited, tools=TOOLS, thinking=ADAPTIVE)
    messages[1]["content"] = messages[1]["content"][1:]  # the thinking block dropped
    assert refusal(messages_server, messages, tools=TOOLS, thinking=ADAPTIVE) == (
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found"
        " `tool_use`. When `thinking` is enabled, a final `assistant` message must start with a"
        " thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks)."
        " We recommend you include thinking blocks from previous turns. To avoid this"
        " requirement, disable `thinking`. Please consult our documentation at"
        " https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
    )
    accepted(messages_server, messages, tools=TOOLS, thinking={"type": "disabled"})


PRESERVED = "claude-fable-5-1"


def preserved_history(server: MessagesServer) -> Msgs:
    """Two turns on a preserved-thinking model: a tool call, then an answer."""
    messages, _ = tool_loop(server, PRESERVED)
    # A preserved model may go on without the tool call's thinking (not refused) ...
    trimmed = [messages[0], {**messages[1], "content": messages[1]["content"][1:]}, messages[2]]
    server.enqueue(text_reply("answer"))
    accepted(server, trimmed, model=PRESERVED, tools=TOOLS)
    server.enqueue(text_reply("answer"))
    answer = accepted(server, messages, model=PRESERVED, tools=TOOLS)
    return [*messages, echo(answer), user("and then?")]


def test_preserved_thinking_is_bound_to_the_conversation_before_it(
    messages_server: MessagesServer,
) -> None:
    history = preserved_history(messages_server)
    messages_server.enqueue(text_reply("fine"))
    accepted(messages_server, history, model=PRESERVED, tools=TOOLS)  # append-only: valid
    bound = (
        "messages.3.content.0: Invalid `signature` in `thinking` block. The block is bound to a"
        " different conversation. Remove the block, or set"
        ' `thinking.block_binding.prefix_mismatch_behavior` to "drop_block".'
    )
    changed = [*history]
    changed[2] = results(("toolu_1", "file a, edited later"))
    assert refusal(messages_server, changed, model=PRESERVED, tools=TOOLS) == bound
    # A client that reorders a tool call's input changes the prompt too.
    reordered = [*history]
    reordered[1] = {**history[1], "content": [*history[1]["content"]]}
    reordered[1]["content"][1] = {**reordered[1]["content"][1], "input": {"mode": "r", "path": "a"}}
    assert refusal(messages_server, reordered, model=PRESERVED, tools=TOOLS) == bound
    # Changing the tools (or the system prompt) invalidates every thinking block.
    more_tools = [*TOOLS, {"name": "write", "input_schema": {"type": "object"}}]
    text = refusal(messages_server, history, model=PRESERVED, tools=more_tools)
    assert text == bound.replace("messages.3.", "messages.1.")
    text = refusal(messages_server, history, model=PRESERVED, tools=TOOLS, system="Be new.")
    assert text == bound.replace("messages.3.", "messages.1.")
    # ... unless the request may change its tools mid-conversation (as Claude Code does).
    messages_server.enqueue(text_reply("loaded"))
    client(messages_server).beta.messages.create(
        model=PRESERVED, max_tokens=2048, messages=history, tools=more_tools,
        betas=[TOOL_CHANGES_BETA],
    )  # fmt: skip
    assert messages_server.pending == 0


def test_drop_block_with_the_beta_header_drops_and_reports(messages_server: MessagesServer) -> None:
    history = preserved_history(messages_server)
    history[2] = results(("toolu_1", "file a, edited later"))
    binding = {**ADAPTIVE, "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
    # Without the beta header the setting does nothing.
    assert "bound to a different conversation" in refusal(
        messages_server, history, model=PRESERVED, tools=TOOLS, thinking=binding
    )
    messages_server.enqueue(text_reply("went on"))
    reply = client(messages_server).beta.messages.create(
        model=PRESERVED, max_tokens=2048, messages=history, tools=TOOLS, thinking=binding,
        betas=[BINDING_BETA],
    )  # fmt: skip
    assert reply.content[-1].text == "went on"
    dropped = [t.to_dict() for t in reply.input_transformations or []]
    assert dropped == [
        {"type": "thinking_dropped", "path": "messages.3.content.0",
         "reason": "prefix_binding_mismatch"}
    ]  # fmt: skip


def test_streamed_thinking_round_trips(messages_server: MessagesServer) -> None:
    messages_server.streaming = True
    redacted = text_reply("streamed too")
    redacted.body["content"][:0] = [redacted_thinking_block()]
    messages_server.enqueue(text_reply("streamed"), redacted)
    replies = []
    for _ in range(2):
        with client(messages_server).messages.stream(
            model="claude-test", max_tokens=2048, messages=[user("q")], thinking=ADAPTIVE
        ) as stream:
            replies.append(stream.get_final_message())
    assert [b.type for b in replies[0].content] == ["thinking", "text"]
    assert [b.type for b in replies[1].content] == ["redacted_thinking", "text"]
    messages_server.streaming = False
    for reply in replies:
        accepted(messages_server, [user("q"), echo(reply), user("more")], thinking=ADAPTIVE)


# --- the context window and usage ------------------------------------------------------


def test_the_context_window(messages_server: MessagesServer) -> None:
    rules = ModelRules(context_window=300)
    messages_server.models["tiny"] = rules
    long = [user("x" * 2000)]
    size = prompt_tokens({"messages": long}, rules)
    assert size > 300
    assert refusal(messages_server, long, model="tiny", max_tokens=10) == (
        f"prompt is too long: {size} tokens > 300 maximum"
    )
    short = [user("x" * 800)]
    size = prompt_tokens({"messages": short}, rules)
    assert size < 300 < size + 200
    assert refusal(messages_server, short, model="tiny", max_tokens=200) == (
        f"input length and `max_tokens` exceed context limit: {size} + 200 > 300, decrease input"
        " length or `max_tokens` and try again"
    )
    messages_server.enqueue(text_reply("fits"))
    accepted(messages_server, short, model="tiny", max_tokens=300 - size)


def test_count_usage_models_report_the_prompt_size(messages_server: MessagesServer) -> None:
    messages_server.models["counted"] = ModelRules(count_usage=True)
    messages = [user("y" * 400)]
    longer = [*messages, {"role": "assistant", "content": "z"}, user("w" * 400)]
    for sent in (messages, longer):
        messages_server.enqueue(text_reply("n", input_tokens=1))
        usage = accepted(messages_server, sent, model="counted").usage
        assert usage.input_tokens == prompt_tokens({"messages": sent}, ModelRules()) > 100
    # Other models keep the scripted usage.
    messages_server.enqueue(text_reply("n", input_tokens=1))
    assert accepted(messages_server, longer).usage.input_tokens == 1


def test_thinking_of_earlier_turns_is_not_counted(messages_server: MessagesServer) -> None:
    messages_server.models["counted"] = ModelRules(count_usage=True)
    every_block = ModelRules(preserved=True)  # counts all blocks, thinking included
    loop, _ = tool_loop(messages_server, "counted", thinking=ADAPTIVE)
    usage = accepted(messages_server, loop, model="counted", tools=TOOLS, thinking=ADAPTIVE).usage
    assert usage.input_tokens == prompt_tokens({"messages": loop, "tools": TOOLS}, every_block)
    later = [*loop, {"role": "assistant", "content": "read"}, user("next")]
    usage = accepted(messages_server, later, model="counted", tools=TOOLS, thinking=ADAPTIVE).usage
    without = [loop[0], {**loop[1], "content": loop[1]["content"][1:]}, *later[2:]]
    assert usage.input_tokens == prompt_tokens({"messages": without, "tools": TOOLS}, every_block)


# --- Chat Completions -----------------------------------------------------------------


def chat_refusal(server: ChatServer, messages: Msgs, **params: Any) -> JsonDict:
    """OpenAI's error object of the 400 the request gets (consuming no queued reply)."""
    import openai

    pending = server.pending
    with pytest.raises(openai.BadRequestError) as caught:
        chat(server, messages, **params)
    assert server.pending == pending
    body: JsonDict = caught.value.body  # type: ignore[assignment]
    assert body["type"] == "invalid_request_error"
    return body


def chat(server: ChatServer, messages: Msgs, **params: Any) -> Any:
    import openai

    params.setdefault("model", "local-test")
    sdk: Any = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0)
    return sdk.chat.completions.create(messages=messages, **params)


def test_chat_tool_calls_and_tool_messages_pair_up(chat_server: ChatServer) -> None:
    asked = {"role": "assistant", "content": None, "tool_calls": [call("read", {}, id="call_1")]}
    body = chat_refusal(chat_server, [user("q"), asked, user("well?")])
    assert body["message"] == (
        "An assistant message with 'tool_calls' must be followed by tool messages responding to"
        " each 'tool_call_id'. The following tool_call_ids did not have response messages:"
        " call_1"
    )
    assert body["param"] == "messages.[1].role"
    orphan = {"role": "tool", "tool_call_id": "call_1", "content": "x"}
    body = chat_refusal(chat_server, [user("q"), orphan])
    assert body["message"] == (
        "Invalid parameter: messages with role 'tool' must be a response to a preceeding"
        " message with 'tool_calls'."
    )
    assert body["param"] == "messages.[1].role"
    chat_server.enqueue(chat_tool_calls(call("read", {})), chat_text("done"))
    assert chat(chat_server, [user("q"), asked, orphan]).choices[0].message.tool_calls


def test_chat_context_window_and_usage(chat_server: ChatServer) -> None:
    chat_server.windows["small"] = 200
    chat_server.count_usage.add("small")
    long = [user("x" * 1000)]
    size = sum(tokens(m) for m in long)
    body = chat_refusal(chat_server, long, model="small")
    assert body["message"] == (
        f"This model's maximum context length is 200 tokens. However, your messages resulted"
        f" in {size} tokens. Please reduce the length of the messages."
    )
    assert (body["param"], body["code"]) == ("messages", "context_length_exceeded")
    short = [user("x" * 400)]
    size = sum(tokens(m) for m in short)
    body = chat_refusal(chat_server, short, model="small", max_tokens=150)
    assert body["message"] == (
        f"This model's maximum context length is 200 tokens. However, you requested"
        f" {size + 150} tokens ({size} in the messages, 150 in the completion). Please reduce"
        " the length of the messages or completion."
    )
    chat_server.enqueue(chat_text("ok", prompt_tokens=1, completion_tokens=2))
    usage = chat(chat_server, short, model="small", max_tokens=50).usage
    assert (usage.prompt_tokens, usage.total_tokens) == (size, size + 2)


def test_refusals_are_recorded_and_consume_nothing(messages_server: MessagesServer) -> None:
    import anthropic

    seen: list[JsonDict] = []

    def respond(body: JsonDict) -> Any:
        seen.append(body)
        return text_reply("from the responder")

    messages_server.responder = respond
    messages_server.enqueue(text_reply("queued"))
    with pytest.raises(anthropic.BadRequestError):
        create(messages_server, [{"role": "robot", "content": "x"}])
    assert messages_server.bodies[-1]["messages"][0]["role"] == "robot"
    assert messages_server.pending == 1 and seen == []
    assert create(messages_server, [user("x")]).content[0].text == "queued"
    assert create(messages_server, [user("x")]).content[0].text == "from the responder"
    assert len(seen) == 1
