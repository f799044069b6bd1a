"""The solver's nets (Caffe's Solver::InitTrainNet / InitTestNets): where each net comes from,
its NetState (solver default < net file < train_state/test_state), and finetuning weights."""
from .. import glog
from ..errors import CaffeError
from ..net import Net
from ..proto import caffe_pb2
from ..proto.io import read_net_param


def weights_list(param):
    """The ``weights`` entries, each a comma-separated list, as trimmed file names."""
    names = []
    for entry in param.weights:
        names.extend(n.strip() for n in entry.split(","))
    return names


def load_weights(param, net):
    for name in weights_list(param):
        glog.info("solver.finetuning_from", "Finetuning from " + name)
        net.copy_trained_layers_from(name)


def _copy(net_param):
    out = caffe_pb2.NetParameter()
    out.CopyFrom(net_param)
    return out


def _with_state(net_param, phase, *overrides):
    state = caffe_pb2.NetState(phase=phase)
    state.MergeFrom(net_param.state)
    for o in overrides:
        state.MergeFrom(o)
    net_param.state.CopyFrom(state)
    return net_param


def build_train_net(solver):
    """The training net from exactly one of net, net_param, train_net, train_net_param."""
    param = solver.param
    fields = ("net", "net_param", "train_net", "train_net_param")
    given = [f for f in fields if param.HasField(f)]
    if not given:
        raise CaffeError("SolverParameter must specify a train net using one of these "
                         "fields: " + ", ".join(fields))
    if len(given) > 1:
        raise CaffeError("SolverParameter must not contain more than one of these fields "
                         "specifying a train_net: " + ", ".join(fields))
    if param.HasField("train_net_param"):
        solver._info("solver.train_net_param",
                     "Creating training net specified in train_net_param.")
        net_param = _copy(param.train_net_param)
    elif param.HasField("train_net"):
        solver._info("solver.train_net_file", "Creating training net from train_net file: "
                     + param.train_net)
        net_param = read_net_param(param.train_net)
    elif param.HasField("net_param"):
        solver._info("solver.net_param", "Creating training net specified in net_param.")
        net_param = _copy(param.net_param)
    else:
        solver._info("solver.net_file", "Creating training net from net file: " + param.net)
        net_param = read_net_param(param.net)
    _with_state(net_param, caffe_pb2.TRAIN, param.train_state)
    net = Net(net_param, dtype=solver.dtype, log=solver.root)
    load_weights(param, net)
    return net


def build_test_nets(solver):
    """Test nets from test_net_param, test_net, then the generic net for the remaining
    test_iter entries; each shares the train net's trained layers."""
    param = solver.param
    n_generic = int(param.HasField("net_param")) + int(param.HasField("net"))
    if n_generic > 1:
        raise CaffeError("Both net_param and net_file may not be specified.")
    n_specific = len(param.test_net_param) + len(param.test_net)
    if n_generic:
        if len(param.test_iter) < n_specific:
            raise CaffeError("test_iter must be specified for each test network.")
    elif len(param.test_iter) != n_specific:
        raise CaffeError("test_iter must be specified for each test network.")
    n_instances = max(len(param.test_iter), n_specific)
    if len(param.test_state) and len(param.test_state) != n_instances:
        raise CaffeError("test_state must be unspecified or specified once per test net.")
    if n_instances and param.test_interval <= 0:
        raise CaffeError("test_interval must be > 0 when test nets are given (got %d)"
                         % param.test_interval)
    sources, net_params = [], []
    for p in param.test_net_param:
        sources.append("test_net_param")
        net_params.append(_copy(p))
    for path in param.test_net:
        sources.append("test_net file: " + path)
        net_params.append(read_net_param(path))
    for _ in range(len(param.test_iter) - len(net_params) if n_generic else 0):
        if param.HasField("net_param"):
            sources.append("net_param")
            net_params.append(_copy(param.net_param))
        else:
            sources.append("net file: " + param.net)
            net_params.append(read_net_param(param.net))
    nets = []
    for i, net_param in enumerate(net_params):
        overrides = [param.test_state[i]] if len(param.test_state) else []
        _with_state(net_param, caffe_pb2.TEST, *overrides)
        solver._info("solver.test_net", "Creating test net (#%d) specified by %s"
                     % (i, sources[i]))
        net = Net(net_param, dtype=solver.dtype, log=solver.root)
        net.debug_info = param.debug_info
        net.forward_only = True   # the solver only tests it: its passes may be a CUDA graph
        load_weights(param, net)
        net.share_trained_layers_with(solver.net, log=False)  # logged at each test
        nets.append(net)
    return nets
