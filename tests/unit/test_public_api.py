from __future__ import annotations

import interlock
import interlock.errors as errors


def test_the_public_names_are_pinned() -> None:
    assert sorted(interlock.__all__) == sorted(
        [
            "Allow",
            "AlreadySettled",
            "ApprovalDenied",
            "ApprovalGate",
            "ApprovalRefused",
            "Ask",
            "AutoResolveContract",
            "Broker",
            "BrokerContract",
            "Cancelled",
            "Choice",
            "Claim",
            "Closed",
            "Confirm",
            "Contract",
            "Contracts",
            "Conversation",
            "Deny",
            "Event",
            "Expired",
            "Followup",
            "FollowupNotFound",
            "Forbidden",
            "Form",
            "HumanInputTools",
            "InputHook",
            "InterlockError",
            "InvalidAnswer",
            "InvalidRequest",
            "Limits",
            "MultiChoice",
            "NotFound",
            "Option",
            "Origin",
            "Page",
            "Park",
            "Pause",
            "RateLimited",
            "Receipt",
            "Rejected",
            "Request",
            "Response",
            "Rewrite",
            "Run",
            "RunConflict",
            "RunFailed",
            "RunPage",
            "RunStatus",
            "Sent",
            "Sessions",
            "Status",
            "TerminalContract",
            "Text",
            "ToolCall",
            "ToolDefinition",
            "ToolFailed",
            "ToolRefused",
            "ToolResult",
            "ToolRunner",
            "Unavailable",
            "Worker",
            "__version__",
            "ask_user_tool",
            "connect",
            "inform_user",
            "request_human_input_tool",
            "requires_approval",
        ]
    )
    for name in interlock.__all__:
        assert getattr(interlock, name) is not None


def test_the_errors_keep_the_standard_bases_callers_catch() -> None:
    assert issubclass(errors.NotFound, ValueError)
    assert issubclass(errors.InvalidRequest, ValueError)
    assert issubclass(errors.InvalidAnswer, ValueError)
    assert issubclass(errors.Rejected, RuntimeError)
    assert issubclass(errors.RateLimited, errors.InterlockError)
    assert issubclass(errors.Unavailable, ConnectionError)  # what callers caught for a store out of reach
    assert errors.Unavailable("the store is restarting", retry_after=2).retry_after == 2
    assert issubclass(errors.Expired, TimeoutError)
    assert issubclass(errors.Closed, RuntimeError)
    assert issubclass(errors.Cancelled, RuntimeError)
    assert not issubclass(errors.Cancelled, errors.Rejected)
    assert not issubclass(errors.Closed, errors.Rejected)
    assert errors.Rejected("r1", "too risky").reason == "too risky"
