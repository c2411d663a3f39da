"""A call that may block forever (a driver call into a wedged GPU), waited for at most a
deadline: it runs on a daemon thread, and past the deadline the caller goes on and the call
is left where it hangs (a daemon thread does not keep the process from exiting)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def call_within(call: Callable[[], T], seconds: float,
                name: str) -> tuple[threading.Thread | None, T | None]:
    """(None, what `call()` returned) when it ended within `seconds`, its exception raised
    here, in the caller's thread; (its thread, None) when it had not, still running."""
    result: list[T] = []
    failure: list[BaseException] = []
    finished = threading.Event()

    def body() -> None:
        try:
            result.append(call())
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)
        finally:
            finished.set()

    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()
    if not finished.wait(seconds):
        return thread, None
    if failure:
        raise failure[0]
    return None, result[0]
