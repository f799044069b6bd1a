"""Data layers under data parallelism (Caffe's DataLayer::Skip): in TRAIN, rank r of n keeps
the records whose running offset is r mod n, so the ranks' batches are disjoint and together are
what one solver reads with an n-times larger batch; TEST reads everything. Data (a database),
HDF5Data (rows across files) and ImageData (an image list) deal alike, across the wrap-around."""
import os

import numpy
import pytest

from caffecli.solvers.data_parallel import run_ranks
from caffecli.proto import caffe_pb2
from data_helpers import close_net, data_net, write_datum_db, write_png

RECORDS = 11  # odd: after a wrap the ranks trade parities, as in Caffe


def _lmdb(folder):
    arrays = [numpy.full((1, 2, 2), i, numpy.uint8) for i in range(RECORDS)]
    return ('type: "Data" data_param { source: "%s" batch_size: %%d backend: LMDB prefetch: '
            '%%d }' % write_datum_db(os.path.join(folder, "db"), arrays))


def _hdf5(folder):
    import h5py
    names = []
    for k, rows in enumerate((range(0, 4), range(4, RECORDS))):  # the wrap crosses files
        names.append(os.path.join(folder, "part%d.h5" % k))
        with h5py.File(names[-1], "w") as f:
            f["data"] = numpy.zeros((len(rows), 1, 2, 2), numpy.float32)
            f["label"] = numpy.asarray(rows, numpy.float32)
    listing = os.path.join(folder, "list.txt")
    with open(listing, "w") as f:
        f.write("\n".join(names) + "\n")
    return ('type: "HDF5Data" hdf5_data_param { source: "%s" batch_size: %%d } '
            'data_param { prefetch: %%d }' % listing)  # HDF5Data reads without prefetching


def _images(folder):
    for i in range(RECORDS):
        write_png(os.path.join(folder, "im%d.png" % i), numpy.full((2, 2), i, numpy.uint8))
    listing = os.path.join(folder, "images.txt")
    with open(listing, "w") as f:
        f.write("".join("im%d.png %d\n" % (i, i) for i in range(RECORDS)))
    return ('type: "ImageData" image_data_param { source: "%s" root_folder: "%s/" batch_size: '
            '%%d is_color: false } data_param { prefetch: %%d }' % (listing, folder))


SOURCES = {"Data": _lmdb, "HDF5Data": _hdf5, "ImageData": _images}


@pytest.fixture(params=sorted(SOURCES))
def db(request, tmp_path):
    """A data layer's text (batch size and prefetch to fill in) whose record k has label k."""
    return SOURCES[request.param](str(tmp_path))


def layer(db, batch, prefetch=4):
    return 'name: "d" top: "data" top: "label" ' + db % (batch, prefetch)


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


def roots_state(db, batch, batches):
    """The root's data state after two ranks each read ``batches`` batches."""
    saved = {}

    def work(rank):
        net = data_net(layer(db, batch), caffe_pb2.TRAIN)
        for _ in range(batches):
            net.forward_pass()
        if rank == 0:
            saved["state"] = net.layers[0].get_data_state()
        close_net(net)
    run_ranks(2, work)
    return saved["state"]


def labels_resumed(db, batch, batches, state):
    """The labels a TRAIN net reads from ``state`` on (in the calling thread's rank)."""
    net = data_net(layer(db, batch), caffe_pb2.TRAIN)
    try:
        net.layers[0].set_data_state(state)
        out = []
        for _ in range(batches):
            net.forward_pass()
            out.append(net.blobs["label"].data.astype(int).tolist())
        return out
    finally:
        close_net(net)


def test_the_roots_saved_position_resumes_every_rank(db):
    """A snapshot stores the root's data state; loaded into any rank it continues that rank's
    own share exactly."""
    straight = per_rank(db, 3, 4)
    state = roots_state(db, 3, 2)
    resumed = {}

    def second_half(rank):
        resumed[rank] = labels_resumed(db, 3, 2, state)
    run_ranks(2, second_half)
    assert resumed[0] == straight[0][2:] and resumed[1] == straight[1][2:]


def test_the_roots_position_resumes_a_single_rank_after_the_whole_batch(db):
    """A two-rank snapshot resumed by one solver: it reads on from the records both ranks have
    taken (a snapshot resumes on any number of ranks)."""
    assert labels_resumed(db, 6, 2, roots_state(db, 3, 2)) == labels_read(db, 6, 4)[2:]
