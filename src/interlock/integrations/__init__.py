"""Adapters that put interlock in front of agent frameworks, each behind its own extra.

One module per framework (`interlock.integrations.langgraph`, ...), imported only by name:
this package imports none of them, so a framework is needed only by the code that uses it.
"""
