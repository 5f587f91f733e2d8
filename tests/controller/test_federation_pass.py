"""The tick's federation-only pass: a wake-up that only the federation step has work for (a job
queued for a peer, a peer's answer) runs that step alone, a whole pass still runs at least every
tick interval, and with budgets configured every pass is whole."""

from __future__ import annotations

import threading

from iris.controller.db.database import Database
from iris.controller.state import tick as tick_module
from iris.controller.state.tick import FEDERATION_PASS_SPACING_S, ControlLoop
from iris.core.config import BudgetsConfig
from iris.core.polling import wait_until


class CountingFederation:
    """Counts the tick's federation steps (the manager's `plan`)."""

    saturated = False

    def __init__(self) -> None:
        self.plans = 0
        self.loop: ControlLoop | None = None
        self.starts: list[tuple[float, bool]] = []  # (when the step began, within a whole pass)

    def plan(self, band_of=None) -> list:
        self.plans += 1
        if self.loop is not None:
            self.starts.append((self.loop._last_federation, self.loop._in_pass))
        return []


def _loop(tmp_path, tick_interval: float, budgets: BudgetsConfig | None = None):
    federation = CountingFederation()
    loop = ControlLoop(
        Database(tmp_path / "controller.db"),
        {},
        {},
        tick_interval=tick_interval,
        federation=federation,
        budgets=budgets,
    )
    return loop, federation


def test_a_federation_wake_runs_the_federation_step_alone_and_a_wake_runs_a_whole_pass(tmp_path):
    loop, federation = _loop(tmp_path, tick_interval=60)
    loop.start()
    loop.wake()  # as the controller does once started
    try:
        wait_until(lambda: loop.generation == 1 and federation.plans == 1, timeout=10, what="the first pass")
        loop.wake_federation()
        wait_until(lambda: federation.plans == 2, timeout=10, what="a federation step")
        assert loop.generation == 1  # no whole pass: backends and the scheduler were not touched
        loop.wake()
        wait_until(lambda: loop.generation == 2, timeout=10, what="a whole pass")
        assert federation.plans == 3  # a whole pass ends with the federation step
    finally:
        loop.stop()


def test_federation_wakes_without_pause_still_let_a_whole_pass_run_each_tick_interval(tmp_path):
    loop, federation = _loop(tmp_path, tick_interval=0.2)
    stop = threading.Event()

    def keep_waking() -> None:
        while not stop.wait(0.002):
            loop.wake_federation()

    waker = threading.Thread(target=keep_waking)
    loop.start()
    waker.start()
    try:
        wait_until(lambda: loop.generation >= 4, timeout=30, what="whole passes between federation steps")
        assert federation.plans > loop.generation
    finally:
        stop.set()
        waker.join()
        loop.stop()


def test_a_burst_of_federation_wakes_runs_the_step_alone_at_most_once_per_spacing(tmp_path):
    # A burst of submits queued for peers wakes the step per submit group: each step alone begins at
    # least FEDERATION_PASS_SPACING_S after the last began, so it takes what queued meanwhile.
    loop, federation = _loop(tmp_path, tick_interval=60)
    federation.loop = loop
    stop = threading.Event()

    def keep_waking() -> None:
        while not stop.wait(0.001):
            loop.wake_federation()

    waker = threading.Thread(target=keep_waking)
    loop.start()
    loop.wake()
    waker.start()
    try:
        wait_until(lambda: federation.plans >= 8, timeout=30, what="federation steps under a burst of wake-ups")
    finally:
        stop.set()
        waker.join()
        loop.stop()
    alone = [(prev[0], start) for prev, (start, whole) in zip(federation.starts, federation.starts[1:]) if not whole]
    assert len(alone) >= 6
    assert all(start - before >= FEDERATION_PASS_SPACING_S for before, start in alone)


def test_a_peer_answer_runs_the_federation_step_without_waiting_out_the_spacing(tmp_path, monkeypatch):
    # Slots a peer's answer freed stay empty until a step fills them: it does not wait to gather submits.
    monkeypatch.setattr(tick_module, "FEDERATION_PASS_SPACING_S", 3600.0)
    loop, federation = _loop(tmp_path, tick_interval=3600)
    loop.start()
    loop.wake()
    try:
        wait_until(lambda: federation.plans == 1, timeout=10, what="the first pass")
        loop.wake_federation(at_once=True)
        wait_until(lambda: federation.plans == 2, timeout=10, what="the step a peer's answer asked for")
        assert loop.generation == 1  # the step alone
    finally:
        loop.stop()


def test_with_budgets_a_federation_wake_runs_a_whole_pass(tmp_path):
    # Queued jobs are judged by what their owners' work here holds now, which only a whole pass reads.
    loop, federation = _loop(tmp_path, tick_interval=60, budgets=BudgetsConfig(users={"alice": 5}))
    loop.start()
    loop.wake()  # as the controller does once started
    try:
        wait_until(lambda: loop.generation == 1, timeout=10, what="the first pass")
        loop.wake_federation()
        wait_until(lambda: loop.generation == 2, timeout=10, what="a whole pass")
        assert federation.plans == 2
    finally:
        loop.stop()


class RacingLoop(ControlLoop):
    """A loop on which a whole-pass wake-up lands at the worst moment once: on the loop's thread,
    just after the loop read whether the next pass must be whole and before it took the flag."""

    race = False

    @property  # type: ignore[override]
    def _full(self) -> bool:
        value = self.__dict__.get("_full_flag", True)
        if self.race and threading.current_thread() is self._thread:
            self.race = False
            self.wake()  # as a cancel or an attempt exit does from another thread
        return value

    @_full.setter
    def _full(self, value: bool) -> None:
        self.__dict__["_full_flag"] = value


def test_a_wake_landing_while_the_loop_takes_the_flag_still_gets_a_whole_pass(tmp_path):
    federation = CountingFederation()
    loop = RacingLoop(Database(tmp_path / "controller.db"), {}, {}, tick_interval=60, federation=federation)
    loop.start()
    loop.wake()
    try:
        wait_until(lambda: loop.generation == 1, timeout=10, what="the first pass")
        loop.race = True
        loop.wake_federation()
        wait_until(lambda: not loop.race and federation.plans >= 2, timeout=10, what="the federation step")
        # The wake-up came after the flag was read: the pass it asked for must still be whole.
        wait_until(lambda: loop.generation == 2, timeout=10, what="the whole pass the wake-up asked for")
    finally:
        loop.stop()


class HeldFederation(CountingFederation):
    """A federation step that waits to be let through, so a test knows a pass is under way."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Semaphore(0)
        self.proceed = threading.Semaphore(0)

    def plan(self, band_of=None) -> list:
        self.entered.release()
        self.proceed.acquire()
        return super().plan(band_of)


def test_wait_for_tick_called_during_a_pass_waits_for_a_pass_begun_after_it(tmp_path):
    # A stop is committed, then the tick is waited for: the pass already under way read the
    # database before the stop, so only the next one stops the processes.
    federation = HeldFederation()
    loop = ControlLoop(Database(tmp_path / "controller.db"), {}, {}, tick_interval=60, federation=federation)
    loop.start()
    loop.wake()
    returned: list[bool] = []
    waiter = threading.Thread(target=lambda: returned.append(loop.wait_for_tick(timeout=30)))
    try:
        federation.entered.acquire()  # the first pass is under way
        waiter.start()
        wait_until(loop._wake.is_set, timeout=10, what="the waiter's wake-up")
        federation.proceed.release()  # the first pass ends; the second begins and is held
        federation.entered.acquire()
        waiter.join(0.5)
        assert waiter.is_alive() and not returned  # the pass it waits for is still held
        federation.proceed.release()
        waiter.join(10)
        assert returned == [True] and loop.generation == 2
    finally:
        for _ in range(4):
            federation.proceed.release()
        loop.stop()
        waiter.join(10)
