"""Every layer, model, legacy, split, share, in-place and loss-weight case Caffe produced."""
import pytest

from golden import case_names, run_layer_case

pytestmark = pytest.mark.devices  # each test runs in CPU and in GPU mode

NON_LAYER = {"solver", "data", "cli"}
CASES = case_names(exclude=NON_LAYER)


@pytest.mark.parametrize("name", CASES or ["<no golden corpus>"])
def test_golden_case(name):
    if name == "<no golden corpus>":
        from golden import require_golden
        require_golden()
    run_layer_case(name)
