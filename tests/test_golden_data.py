"""Golden data cases: each data__* case's batches, as BVLC Caffe produced them (TEST phase).

Each case folder is copied to a temporary folder first: opening a LevelDB writes to its folder.
"""
import os
import shutil

import numpy
import pytest

from golden import Case, assert_close, case_names, in_dir, require_golden

pytestmark = pytest.mark.devices  # each test runs in CPU and in GPU mode

CASES = case_names({"data"})


def run_data_case(name, workdir):
    from caffecli import backend
    from caffecli.net import Net
    from caffecli.proto import caffe_pb2
    import caffecli
    case = Case(name)
    folder = os.path.join(str(workdir), name)
    shutil.copytree(case.dir, folder)
    with in_dir(folder), case.h5() as h5:
        if "seed" in case.meta:
            caffecli.set_random_seed(case.meta["seed"])
        phase = caffe_pb2.TRAIN if case.meta.get("phase") == "TRAIN" else caffe_pb2.TEST
        net = Net("net.prototxt", phase, log=False)
        batches = h5["batches"]
        assert len(batches) == case.meta.get("batches", len(batches))
        for k in range(len(batches)):
            net.forward_pass()
            for top in batches[str(k)]:
                want = numpy.asarray(batches[str(k)][top])
                got = backend.to_host(net.blob_by_name(top).data)
                assert got.shape == want.shape, (name, k, top, got.shape, want.shape)
                assert_close(got, want, case.rtol, case.atol, "%s batch %d %s" % (name, k, top))
        for layer in net.layers:
            if hasattr(layer, "close"):
                layer.close()


@pytest.mark.parametrize("name", CASES)
def test_golden_data(name, tmp_path):
    run_data_case(name, tmp_path)


def test_data_cases_exist():
    require_golden()
    assert len(CASES) >= 15
