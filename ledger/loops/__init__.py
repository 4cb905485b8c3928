"""Durable tool-use loops on the official model SDKs (optional extras: ``runledger[anthropic]``,
``runledger[openai]``).

The author gives a model, a system prompt, the ``@tool`` functions and the first user message;
the loop asks the model, runs the tools it calls, hands their results back, and repeats until
the model answers without a tool call:

- each model turn is a model step (``<step>.turn.<n>``) whose input hash covers the whole
  request (model, messages, tools, parameters); its answer is stored, and a resume replays it
  without asking the model again;
- each tool call of a turn is a tool step (``<step>.turn.<n>.tools.<i>.<tool>``) whose kind
  (pure, read, effect) and reconcile come from the ``@tool`` declaration; the calls of one turn
  run as a fan-out (``ctx.parallel``), so an effect is never sent twice;
- the tools' JSON schemas come from their signatures (``Tool.parameters()``), and are part of
  the agent's tool-schema hash;
- ``Limits`` (turns, tokens, cost) stop the run as ``needs_attention``/``budget`` with the
  figures before a turn would pass them.

``ledger.loops.messages.messages_loop`` speaks Anthropic's Messages API (``tool_use`` /
``tool_result``); ``ledger.loops.chat.chat_loop`` speaks OpenAI's Chat Completions
(``tool_calls`` / ``role: tool``). The SDKs are imported only when a turn must really be sent.
"""

from __future__ import annotations

from ledger.loops.base import Limits, ToolCall, Usage

__all__ = ["Limits", "ToolCall", "Usage"]
