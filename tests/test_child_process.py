"""A flow step in a process of its own (flows/child_process.py): its progress comes through as
it is said, its result or its error comes back, and a process that dies says so. (The model
step run so: tests/test_model_step.py.)"""
from __future__ import annotations

import os

import pytest

from aequum.flows.child_process import ChildEnded, run_in_child


class Refused(ValueError):
    pass


def counting(n: int, say):
    for i in range(n):
        say(f"step {i}")
    return {"pid": os.getpid(), "squares": [i * i for i in range(n)]}


def failing(message: str, say):
    say("about to fail")
    raise Refused(message)


class Odd(Exception):
    def __init__(self, what, where):  # pickles, but cannot be made again from its pickle
        super().__init__(f"{what} at {where}")


def failing_oddly(say):
    raise Odd("no income", "row 7")


def dying(code: int, say):
    say("about to exit")
    os._exit(code)


def test_messages_and_result_come_back():
    said: list[str] = []
    result = run_in_child(counting, (5,), said.append)
    assert said == [f"step {i}" for i in range(5)]
    assert result["squares"] == [0, 1, 4, 9, 16] and result["pid"] != os.getpid()


def test_the_error_of_the_step_is_raised_here_with_its_type_and_where_it_was_raised():
    said: list[str] = []
    with pytest.raises(Refused, match="no such column 'income'") as caught:
        run_in_child(failing, ("no such column 'income'",), said.append)
    assert said == ["about to fail"]
    assert any("raised in the process running failing" in note for note in caught.value.__notes__)


def test_an_error_that_cannot_travel_comes_back_as_its_type_and_message():
    with pytest.raises(RuntimeError, match="Odd: no income at row 7"):
        run_in_child(failing_oddly, (), lambda _m: None)


def test_a_process_that_dies_is_an_error_naming_its_exit_status():
    with pytest.raises(ChildEnded, match="dying ended with exit status 7"):
        run_in_child(dying, (7,), lambda _m: None)


def lingering(flag: str, say):
    """A step whose process, its result given, ends only once ``flag`` exists."""
    import atexit
    import time

    def wait_for_flag():
        for _ in range(600):
            if os.path.exists(flag):
                return
            time.sleep(0.05)

    atexit.register(wait_for_flag)
    return os.getpid()


def test_the_result_comes_back_without_waiting_for_the_process_to_end(tmp_path):
    """Its ending (freeing a large step's memory takes a second) is not waited for; the
    process is still reaped when it ends."""
    import time

    flag = tmp_path / "end"
    pid = run_in_child(lingering, (str(flag),), lambda _m: None)
    os.kill(pid, 0)  # still running: its ending waits for the flag
    flag.touch()
    for _ in range(600):  # ended and reaped (a zombie would still take the signal)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the step's process {pid} did not end")
