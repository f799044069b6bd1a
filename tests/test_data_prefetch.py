"""Prefetcher: order, bounded read-ahead, error hand-over, clean shutdown."""
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from caffecli.data.prefetch import Prefetcher


def counter():
    state = {"n": 0}

    def produce():
        state["n"] += 1
        return state["n"]
    return produce, state


def test_batches_arrive_in_order_and_read_ahead_is_bounded():
    produce, state = counter()
    p = Prefetcher(produce, capacity=3)
    assert [p.get() for _ in range(5)] == [1, 2, 3, 4, 5]
    time.sleep(0.3)
    # 3 queued plus at most one finished batch waiting for room
    assert 8 <= state["n"] <= 9
    assert len(p.pending()) == 3
    p.stop()
    assert not p.running


def test_error_in_thread_reraises_in_consumer():
    def produce():
        raise ValueError("bad record 7")
    p = Prefetcher(produce)
    with pytest.raises(ValueError, match="bad record 7"):
        p.get()
    p.stop()


def test_stop_ends_a_thread_blocked_on_a_full_queue():
    produce, _ = counter()
    p = Prefetcher(produce, capacity=1)
    p.get()
    time.sleep(0.1)
    before = threading.active_count()
    p.stop()
    assert threading.active_count() == before - 1
    p.start()                    # restartable after stop
    assert p.get() > 0
    p.stop()


def test_ctrl_c_while_waiting_for_a_batch_exits_promptly():
    """SIGINT during get() unwinds the main thread; the daemon thread does not keep the
    process alive and atexit stops it."""
    code = textwrap.dedent("""
        import sys, time
        from caffecli.data.prefetch import Prefetcher
        def slow():
            time.sleep(0.2)
            return 1
        p = Prefetcher(slow, capacity=2)
        print("ready", flush=True)
        try:
            while True:
                p.get()
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(130)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err
    assert "interrupted" in out
