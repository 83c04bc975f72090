"""Agent frameworks in front of interlock: their pauses become requests, their runs park.

Each module here adapts one framework, behind its own extra, on top of the approval gate
and the runs worker: `interlock.integrations.pydantic_ai` (`pip install
interlock[pydantic-ai]`), `interlock.integrations.openai_agents` (`pip install
interlock[openai-agents]`) and `interlock.integrations.langgraph` (`pip install
interlock[langgraph]`). A run that needs a person stores the framework's own state in the
run and waits on no process; a `interlock.runs.Worker` in any process resumes it once the
person has answered. This package imports none of them, so a framework is needed only by
the code that uses it; the core never imports this package.
"""

__all__: list[str] = []  # each framework's module is imported by name
