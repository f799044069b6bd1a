"""Golden cases whose every value is Caffe's own bit for bit on the host, not only within the
case's tolerance: layers whose arithmetic caffecli follows step by step (the C library's exp,
log and tanh, kernels/libm.py; the loss loops' order; the recurrent layers' step-by-step
shared gradients; AVE pooling's quotient rounded to the data's type; the solvers' BLAS steps
rounded once, kernels/blas_steps.py; BatchNorm's, MVN's and Softmax's sums and dots in
OpenBLAS's gemv and sdot orders, the losses' and Reduction's caffe_cpu_dot and caffe_cpu_asum,
Bias's and Scale's gemvs and dots, kernels/caffe_gemv.py; Power's powf)."""
import platform

import pytest

import host_blas
from caffecli.kernels import jit

pytestmark = [
    pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed"),
    pytest.mark.skipif(platform.libc_ver()[0] != "glibc",
                       reason="Caffe's golden numbers used glibc's math functions")]

BIT_EXACT = ["tanh", "sigmoid", "exp", "log", "elu", "bnll", "swish", "lstmunit", "lstm", "rnn",
             "sigmoidce", "infogain", "multinomial", "pool", "batchnorm", "mvn", "softmax",
             "softmaxloss", "reduction", "hinge", "euclidean", "contrastive", "power", "bias",
             "scale"]


@pytest.mark.parametrize("family", BIT_EXACT)
def test_golden_cases_of_these_layers_are_caffes_bit_for_bit(family, monkeypatch):
    """Every value of these families' golden cases (forward, input and parameter gradients) is
    Caffe's to the bit on the host, not only within the case's tolerance."""
    import golden
    names = [n for n in golden.case_names() if n.split("__")[0] == family]
    if not names:
        golden.require_golden()
    compared = []

    def same_bits(got, want, rtol, atol, what):
        values, differing = golden.differing_bits(got, want)
        assert differing == 0, what
        compared.append(values)
    monkeypatch.setattr(golden, "assert_close", same_bits)
    for name in names:
        golden.run_layer_case(name)
    assert sum(compared) > 0


# solver cases whose every iteration is Caffe's to the bit (all but rmsprop_shared_l1, whose
# weight shared by two layers parts in a last place at its tenth iteration): the updates'
# axpy/axpby steps round once, as OpenBLAS's FMA does, powx(., 0.5) is the C library's pow,
# the bias gradients are Caffe's gemv into the diff and gradient clipping's norm its sdot,
# in OpenBLAS's orders
EXACT_SOLVERS = ["solver__" + name for name in (
    "adadelta", "adagrad", "adagrad_delta1e-6_inv", "adagrad_itersize3_clip", "adam",
    "adam_defaults_fixed", "clip", "exp", "hdf5_snapshots", "inv", "itersize2", "lrmult",
    "multistep", "nesterov", "nesterov_lrmult_decaymult", "poly", "resume_cli", "rmsprop",
    "rmsprop_decay0.9_poly", "sgd_average_loss3", "sgd_clip0.05_itersize2",
    "sgd_euclidean_shared", "sgd_l1", "sgd_l1_wd1e-3_step", "sgd_mom0.9_wd5e-4_l2_fixed",
    "sgd_momentum", "sgd_sigmoid_gamma0.5", "sigmoid", "step")]


@pytest.mark.skipif(not host_blas.skylakex(),
                    reason="the solver cases' products are Caffe's bits with OpenBLAS's SKYLAKEX "
                           "kernels; this host's run others (%s): tests/test_golden_solvers.py "
                           "checks them within tolerance" % ", ".join(host_blas.cores()))
@pytest.mark.parametrize("name", EXACT_SOLVERS)
def test_these_solver_trajectories_are_caffes_bit_for_bit(name, tmp_path, monkeypatch):
    import io

    import golden
    from caffecli import glog
    case = golden.writable_case(name, tmp_path)
    monkeypatch.chdir(tmp_path)
    glog.set_stream(io.StringIO())
    for it, params in golden.solver_steps(case):
        for lname, i, got, want in params:
            assert got.tobytes() == want.tobytes(), (it, lname, i)
