"""Guards that put Warden in front of Python agent frameworks' tool calls.

- :mod:`warden.integrations.openai_agents`: ``WardenGuard`` for the OpenAI
  Agents SDK (a tool input guardrail, and its human-in-the-loop).
- :mod:`warden.integrations.langchain`: ``WardenMiddleware`` for LangChain v1
  agents and LangGraph (``wrap_tool_call``).

Each tool call becomes one Warden request. A tool with no mapping is a
``tool.call`` of ``<server>/<tool name>`` with its arguments; a mapping makes
it the action it really is, so that the file, command and HTTP policies
apply::

    from warden.integrations import reads, runs, fetches

    tools = {"read_file": reads("path"), "shell": runs("command"), "get": fetches("url")}

Every guard fails closed: a denial, an approval that never came, an
unreachable monitor, a mapping that cannot read the arguments or any other
error, and the tool does not run; the model is told why, naming the policy.
"""

from ._gate import Mapper, ToolMapping, deletes, fetches, reads, runs, uses_secret, writes

__all__ = ["Mapper", "ToolMapping", "deletes", "fetches", "reads", "runs", "uses_secret", "writes"]
