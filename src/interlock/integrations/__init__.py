"""Agent frameworks in front of interlock: their pauses become requests, their runs park.

Each module here adapts one framework (an optional extra each) on top of the approval gate
and the runs worker: `interlock.integrations.pydantic_ai` (`pip install
interlock[pydantic-ai]`) and `interlock.integrations.openai_agents` (`pip install
interlock[openai-agents]`). A run that needs a person stores the framework's own state in
the run and waits on no process; a `interlock.runs.Worker` in any process resumes it once
the person has answered. The core never imports this package.
"""
