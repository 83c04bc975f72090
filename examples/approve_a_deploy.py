"""An agent asks for approval and a question; a stand-in for the person answers.

Run it: `python examples/approve_a_deploy.py` (it uses an in-memory store, so it needs no
set-up; point it at `sqlite:///interlock.db` and answer with `interlock answer` instead).
"""

from __future__ import annotations

import asyncio

import interlock
from interlock import Broker, Choice, Confirm, Text


async def person(broker: Broker, answers: list[object]) -> None:
    """Answers each new request in turn, as someone at the inbox would."""
    async for event in broker.events(after=await broker.last_event_id(), follow=True):
        if event.type == "created" and event.request is not None:
            print(f"  [inbox] {event.request.asks[0].prompt}")
            await broker.resolve(event.request.id, answers.pop(0), by="alice", via="inbox")
            if not answers:
                return


async def main() -> None:
    async with interlock.connect("memory://") as broker:
        answers: list[object] = [True, {"region": "eu", "note": "watch the p99"}]
        inbox = asyncio.create_task(person(broker, answers))
        await asyncio.sleep(0)  # let the person start watching

        approved = await broker.ask(Confirm("Deploy v2.3 to prod?"), kind="approval", to="alice", timeout=60)
        print("approved:", approved)
        plan = await broker.ask(
            [Choice("Which region first?", ["eu", "us"], id="region"), Text("Anything to watch?", id="note")],
            to="alice",
            timeout=60,
        )
        print("plan:", plan)
        await inbox


if __name__ == "__main__":
    asyncio.run(main())
