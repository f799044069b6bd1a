"""The Data layer under data parallelism (Caffe's DataLayer::Skip): in TRAIN, rank r of n
keeps the records whose running offset is r mod n, so the ranks' batches are disjoint and
together are what one solver reads with an n-times larger batch; TEST reads everything."""
import numpy
import pytest

from caffecli.solvers.data_parallel import run_ranks
from caffecli.proto import caffe_pb2
from data_helpers import close_net, data_net, write_datum_db

RECORDS = 11  # odd: after a wrap the ranks trade parities, as in Caffe


@pytest.fixture
def db(tmp_path):
    arrays = [numpy.full((1, 2, 2), i, numpy.uint8) for i in range(RECORDS)]
    return write_datum_db(str(tmp_path / "db"), arrays)


def layer(db, batch, prefetch=4):
    return ('name: "d" type: "Data" top: "data" top: "label" data_param { source: "%s" '
            'batch_size: %d backend: LMDB prefetch: %d }' % (db, batch, prefetch))


def labels_read(db, batch, batches, phase=caffe_pb2.TRAIN, prefetch=4):
    net = data_net(layer(db, batch, prefetch), phase)
    try:
        out = []
        for _ in range(batches):
            net.forward_pass()
            out.append(net.blobs["label"].data.astype(int).tolist())
        return out
    finally:
        close_net(net)


def per_rank(db, batch, batches, ranks=2, **kw):
    got = {}

    def work(rank):
        got[rank] = labels_read(db, batch, batches, **kw)
    run_ranks(ranks, work)
    return got


@pytest.mark.parametrize("prefetch", [1, 4])
def test_ranks_read_disjoint_records_that_make_the_full_batch(db, prefetch):
    got = per_rank(db, 3, 4, prefetch=prefetch)
    # running offsets 0,1,2,... over an 11-record database that wraps
    stream = [k % RECORDS for k in range(24)]
    assert got[0] == [stream[0:6:2], stream[6:12:2], stream[12:18:2], stream[18:24:2]]
    assert got[1] == [stream[1:6:2], stream[7:12:2], stream[13:18:2], stream[19:24:2]]
    full = labels_read(db, 6, 4)
    for b in range(4):
        assert sorted(got[0][b] + got[1][b]) == sorted(full[b])


def test_test_phase_reads_every_record_on_every_rank(db):
    got = per_rank(db, 3, 2, phase=caffe_pb2.TEST)
    assert got[0] == got[1] == [[0, 1, 2], [3, 4, 5]]


def test_the_roots_saved_position_resumes_every_rank(db):
    """A snapshot stores the root's data state; loaded into any rank it continues that rank's
    own share exactly."""
    straight = per_rank(db, 3, 4)
    saved = {}

    def first_half(rank):
        net = data_net(layer(db, 3), caffe_pb2.TRAIN)
        for _ in range(2):
            net.forward_pass()
        if rank == 0:
            saved["state"] = net.layers[0].get_data_state()
        close_net(net)
    run_ranks(2, first_half)
    resumed = {}

    def second_half(rank):
        net = data_net(layer(db, 3), caffe_pb2.TRAIN)
        net.layers[0].set_data_state(saved["state"])
        resumed[rank] = []
        for _ in range(2):
            net.forward_pass()
            resumed[rank].append(net.blobs["label"].data.astype(int).tolist())
        close_net(net)
    run_ranks(2, second_half)
    assert resumed[0] == straight[0][2:] and resumed[1] == straight[1][2:]
