"""SyncedMemory: every head transition of Caffe's syncedmem.cpp, with the copies each makes,
on the stand-in device (which counts host<->device copies)."""
import numpy
import pytest

from caffecli.syncedmem import HEAD_AT_CPU, HEAD_AT_GPU, SYNCED, UNINITIALIZED, SyncedMemory


def mem_at(head, standin):
    """A 3-value memory whose head is ``head``, holding 1 2 3 wherever it is current."""
    m = SyncedMemory(3, numpy.float32)
    if head == HEAD_AT_CPU:
        m.mutable_cpu_data()[...] = [1, 2, 3]
    elif head == HEAD_AT_GPU:
        m.mutable_gpu_data()[...] = standin.asarray([1, 2, 3])
    elif head == SYNCED:
        m.mutable_cpu_data()[...] = [1, 2, 3]
        m.gpu_data()
    assert m.head == head
    standin.reset_transfers()
    return m


def values(array):
    """The values of a host or stand-in device array, without counting a copy (test only)."""
    return array.tolist() if isinstance(array, numpy.ndarray) else array._a.tolist()


# (start head, accessor, head after, copies made)
TRANSITIONS = [
    (UNINITIALIZED, "cpu_data", HEAD_AT_CPU, {"h2d": 0, "d2h": 0}),
    (UNINITIALIZED, "mutable_cpu_data", HEAD_AT_CPU, {"h2d": 0, "d2h": 0}),
    (UNINITIALIZED, "gpu_data", HEAD_AT_GPU, {"h2d": 0, "d2h": 0}),
    (UNINITIALIZED, "mutable_gpu_data", HEAD_AT_GPU, {"h2d": 0, "d2h": 0}),
    (HEAD_AT_CPU, "cpu_data", HEAD_AT_CPU, {"h2d": 0, "d2h": 0}),
    (HEAD_AT_CPU, "mutable_cpu_data", HEAD_AT_CPU, {"h2d": 0, "d2h": 0}),
    (HEAD_AT_CPU, "gpu_data", SYNCED, {"h2d": 1, "d2h": 0}),
    (HEAD_AT_CPU, "mutable_gpu_data", HEAD_AT_GPU, {"h2d": 1, "d2h": 0}),
    (HEAD_AT_GPU, "gpu_data", HEAD_AT_GPU, {"h2d": 0, "d2h": 0}),
    (HEAD_AT_GPU, "mutable_gpu_data", HEAD_AT_GPU, {"h2d": 0, "d2h": 0}),
    (HEAD_AT_GPU, "cpu_data", SYNCED, {"h2d": 0, "d2h": 1}),
    (HEAD_AT_GPU, "mutable_cpu_data", HEAD_AT_CPU, {"h2d": 0, "d2h": 1}),
    (SYNCED, "cpu_data", SYNCED, {"h2d": 0, "d2h": 0}),
    (SYNCED, "gpu_data", SYNCED, {"h2d": 0, "d2h": 0}),
    (SYNCED, "mutable_cpu_data", HEAD_AT_CPU, {"h2d": 0, "d2h": 0}),
    (SYNCED, "mutable_gpu_data", HEAD_AT_GPU, {"h2d": 0, "d2h": 0}),
]


@pytest.mark.parametrize("start,accessor,after,copies", TRANSITIONS,
                         ids=["%s-%s" % (t[0], t[1]) for t in TRANSITIONS])
def test_head_transition(standin, start, accessor, after, copies):
    m = mem_at(start, standin)
    got = getattr(m, accessor)()
    assert m.head == after
    assert standin.transfers == copies
    want = [0, 0, 0] if start == UNINITIALIZED else [1, 2, 3]
    assert values(got) == want
    assert isinstance(got, numpy.ndarray) == accessor.endswith("cpu_data")


def test_a_write_on_one_side_is_seen_on_the_other_once(standin):
    m = SyncedMemory(2, numpy.float32)
    m.mutable_gpu_data()[...] = standin.asarray([5, 6])
    standin.reset_transfers()
    assert m.cpu_data().tolist() == [5, 6] and m.cpu_data().tolist() == [5, 6]
    m.mutable_cpu_data()[...] = [7, 8]
    assert values(m.gpu_data()) == [7, 8] and values(m.gpu_data()) == [7, 8]
    assert standin.transfers == {"h2d": 1, "d2h": 1}
    assert m.cpu is not None and m.gpu is not None   # each copy allocated once, then reused


def test_new_memory_reads_as_zeros_on_either_side(standin):
    assert SyncedMemory(4, numpy.float64).cpu_data().tolist() == [0.0] * 4
    assert values(SyncedMemory(4, numpy.float64).gpu_data()) == [0.0] * 4


@pytest.mark.parametrize("start", [HEAD_AT_CPU, HEAD_AT_GPU, SYNCED])
def test_a_cleared_memory_reads_as_zeros_wherever_it_is_read(standin, start):
    """A lazy clear (ClearParamDiffs on the host) writes no zeros until the values are used,
    and then on whichever side reads them; the other side's old copy is stale."""
    for accessor in ("cpu_data", "mutable_cpu_data", "gpu_data", "mutable_gpu_data"):
        m = mem_at(start, standin)
        m.clear_cpu_data()
        assert m.head == HEAD_AT_CPU
        assert values(getattr(m, accessor)()) == [0, 0, 0], accessor
        assert m.cpu.tolist() == [0, 0, 0]


def test_a_clear_is_claimed_once_by_a_writer_of_every_value():
    m = SyncedMemory(3, numpy.float32)
    m.mutable_cpu_data()[...] = [1, 2, 3]
    m.clear_cpu_data()
    assert m.cpu.tolist() == [1, 2, 3]          # no zeros' pass yet
    assert m.claim_clear() and not m.claim_clear()
    m.cpu[...] = [4, 5, 6]                       # the claimer's writes
    assert m.cpu_data().tolist() == [4, 5, 6]    # not wiped by the clear afterwards
    m.clear_cpu_data()
    m.cpu_data()
    assert not m.claim_clear()                   # used: the zeros are written, nothing to claim
    m.clear_cpu_data()
    m.overwrite_cpu_data()[...] = 7
    assert not m.claim_clear() and m.cpu_data().tolist() == [7, 7, 7]


def test_a_clear_of_memory_never_used_allocates_zeros():
    m = SyncedMemory(2, numpy.float32)
    m.initialize(lambda a: a.fill(9))   # a pending filler the clear drops
    m.clear_cpu_data()
    assert not m.claim_clear() and m.cpu_data().tolist() == [0, 0]
